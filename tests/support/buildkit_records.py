"""BuildKit's cache records on the test daemon (`docker buildx du --verbose`), and dropping the ones a test made, so
that a second build meets a BuildKit that has never seen its layers (as a fresh machine would), without touching
any record another test or engineer made on the shared daemon."""

from __future__ import annotations

from tests.support.registry_env import docker


def records() -> list[dict[str, str]]:
    """Every record: ID, Parent (absent for a bottom layer), Description ("pulled from REF@DIGEST" once its blob was
    fetched), ... as `docker buildx du --verbose` prints them."""
    out = docker("buildx", "du", "--verbose").stdout
    found = []
    for block in out.split("\n\n"):
        fields = dict(
            (key.strip(), value.strip()) for key, _, value in (line.partition(":") for line in block.splitlines())
        )
        if "ID" in fields:
            found.append(fields)
    return found


def chains_of(manifests: set[str]) -> set[str]:
    """The ids of the records of layer chains whose bottom layer was pulled from one of `manifests` (image digests),
    with every record above them. Only for layers no other build has (a test's own unique content): a chain's
    bottom record is then one this test's pull made."""
    recs = records()
    own = {r["ID"] for r in recs if "Parent" not in r and any(d in r.get("Description", "") for d in manifests)}
    while True:
        above = {r["ID"] for r in recs if r.get("Parent") in own} - own
        if not above:
            return own
        own |= above


def drop_chains(manifests: set[str]) -> int:
    """Prune the records `chains_of(manifests)` names, top first (a record under another is kept while that one
    is); how many. Remove the images built on them first: BuildKit keeps a record an image in the store holds
    ("shared")."""
    own = chains_of(manifests)
    dropped = len(own)
    while own:
        parents = {r.get("Parent") for r in records() if r["ID"] in own}
        for rid in own - parents:
            docker("buildx", "prune", "--force", "--filter", f"id={rid}")
        left = chains_of(manifests)
        assert left < own, f"BuildKit kept the records {sorted(left)}"
        own = left
    return dropped
