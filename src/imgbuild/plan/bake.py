"""`buildkit/docker-bake.json`: one buildx bake target per variant, with `imgbuild build`'s Dockerfile (`ARG BASE`
from images.lock) on the generated context `buildkit/context/`, whose layer folders are named by digest. `make_bake`
is pure; `write_bake` and `write_context` write the file and the context (atomically), `write` both (what `bake
--json` prints), `check` reads them back."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imgbuild.atomic import write_text
from imgbuild.errors import ConfigError
from imgbuild.patches.variants import VariantPlan
from imgbuild.plan import dockerfile, labels
from imgbuild.plan.builds import immutable_tag, title_of
from imgbuild.plan.labels import ProjectInputs
from imgbuild.plan.layers import digest_lines, share_layers
from imgbuild.registry.lock import ImagesLock
from imgbuild.shapes import derived, named

BAKE_FILE = "buildkit/docker-bake.json"
CONTEXT_DIR = "buildkit/context"
BAKE_FORMAT = "imgbuild-bake/2"  # 2: the layers' checked-hash bytecode, compiled in a stage by the base's python
# A loopback registry: pushable when one runs (.ci/start-registry.sh), never a namespace of
# somebody else; CI and users set REGISTRY (e.g. ghcr.io/OWNER).
DEFAULT_REGISTRY = "localhost:5000"


@dataclass(frozen=True)
class BakeTarget:
    variant: str
    platforms: tuple[str, ...]  # as the bake file names them
    repository: str
    base: str  # what BASE defaults to: the locked `ref@index-digest`, or the bare tag when unlocked
    locked: bool
    dockerfile: str
    labels: Mapping[str, str] = field(repr=False)
    inputs_digest: str
    immutable_tag: str
    moving_tags: tuple[str, ...]
    layers: tuple[str, ...]  # context layer directory names, bottom first

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.immutable_tag, *self.moving_tags)


@dataclass(frozen=True)
class Bake:
    targets: tuple[BakeTarget, ...]
    context: Mapping[str, bytes] = field(repr=False)  # path under buildkit/context -> bytes
    text: str  # the JSON file


def escape(value: str) -> str:
    """Keep bake's HCL templating away from literal text (`${` and `%{` start templates)."""
    return value.replace("${", "$${").replace("%{", "%%{")


def _base_ref(plan: VariantPlan, lock: ImagesLock | None) -> tuple[str, str | None, bool]:
    """(BASE default, base digest label (None: unknown, so absent), locked?)."""
    v = plan.variant
    base = v.base_ref()
    if lock is not None and v.name in lock.variants and lock.variants[v.name].base == base:
        locked = lock.bases[base]
        return locked.pinned(), locked.digest, True
    return base, None, False


def make_bake(inputs: ProjectInputs, plans: Sequence[VariantPlan], lock: ImagesLock | None) -> Bake:
    by_name = {p.variant.name: p for p in plans}
    for p in plans:
        if not p.variant.image.site_packages:
            raise ConfigError(
                f"images/{p.variant.name}.yaml: image.site_packages is needed for the bake file (no base is run)",
                hint="set image.site_packages, e.g. /usr/local/lib/python3.12/dist-packages, in the root variant",
            )
    shared = share_layers(plans)  # the layers `imgbuild build` makes
    context: dict[str, bytes] = {}
    for _, lp in shared.groups:
        for node in lp.nodes:
            source = by_name[node.variants[0]]
            context.update(dockerfile.layer_context({node.name: {f.path: source.contents[f.path] for f in node.files}}))
    chains = {n: tuple(node.name for node in shared.chain(n)) for n in by_name}
    targets = [_target(inputs, by_name[n], chains[n], lock) for n in sorted(by_name)]
    text = render_json(targets)
    return Bake(tuple(targets), context, text)


def _target(inputs: ProjectInputs, plan: VariantPlan, chain: tuple[str, ...], lock: ImagesLock | None) -> BakeTarget:
    v = plan.variant
    site = v.image.site_packages or ""
    base, base_digest, locked = _base_ref(plan, lock)
    keep = v.image.entrypoint == "keep"
    text = dockerfile.render_image(
        base, site, chain, v.image.env, {}, keep_entrypoint=keep, base_arg=True, bytecode=True
    )
    image_labels = labels.image_labels(
        plan,
        inputs,
        base_ref=v.image.base or "",
        base_digest=base_digest,
        site_packages=site,
        layers=chain,
        title=title_of(v.repository(), v.name, v.image.tags),
        source=None,  # the committed file cannot name the commit that holds it: CI adds source/revision
    )
    platforms = tuple(map(str, v.image.platforms))
    digest = digest_lines([BAKE_FORMAT, *platforms, base, text, json.dumps(image_labels, sort_keys=True)])
    final = dict(sorted({**image_labels, labels.INPUTS: digest}.items()))
    return BakeTarget(
        variant=v.name,
        platforms=platforms,
        repository=v.repository(),
        base=base,
        locked=locked,
        dockerfile=text,
        labels=final,
        inputs_digest=digest,
        immutable_tag=immutable_tag(inputs, digest),
        moving_tags=tuple(v.image.tags),
        layers=chain,
    )


def render_json(targets: Sequence[BakeTarget]) -> str:
    doc = {
        "variable": {
            "REGISTRY": {"default": DEFAULT_REGISTRY},
            "CACHE_PREFIX": {"default": ""},
        },
        "group": {"default": {"targets": [t.variant for t in targets]}},
        "target": {
            t.variant: {
                "context": CONTEXT_DIR,
                "dockerfile-inline": escape(t.dockerfile),
                "args": {"BASE": escape(t.base)},
                "platforms": list(t.platforms),
                "tags": [f"${{REGISTRY}}/{t.repository}:{tag}" for tag in t.tags],
                "labels": {escape(k): escape(val) for k, val in t.labels.items()},
                "attest": ["type=provenance,disabled=true", "type=sbom,disabled=true"],
                "cache-from": [f"type=gha,scope=${{CACHE_PREFIX}}{t.variant}"],
                "cache-to": [f"type=gha,scope=${{CACHE_PREFIX}}{t.variant},mode=max"],
            }
            for t in targets
        },
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


# -- files on disk -------------------------------------------------------------------
def write_context(root: Path, bake: Bake) -> bool:
    """Write buildkit/context/ (all files mtime 0) through a staging dir; False if already current."""
    target = root / CONTEXT_DIR
    if context_problems(root, bake) == []:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".context-", dir=target.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(dockerfile.tar_files(bake.context, 0))) as tar:
            tar.extractall(staging, filter="data")  # 0644 files, 0755 dirs, mtime 0
        staging.chmod(0o755)
        os.utime(staging, (0, 0))
        old = None
        if target.exists():
            old = target.with_name(f".context-old-{os.getpid()}")
            target.rename(old)
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True


def write_bake(root: Path, bake: Bake) -> bool:
    path = root / BAKE_FILE
    if path.is_file() and path.read_text() == bake.text:
        return False
    write_text(path, bake.text)
    return True


@named("BakeTarget")  # a target as `bake --json` shows it (no docstring: its schema has no description)
@dataclass(frozen=True)
class BakedTarget:
    variant: str
    tags: list[str]
    platforms: list[str]
    layers: list[str]


@dataclass(frozen=True)
class Baked:
    """What `imgbuild bake` wrote (`write`): whether the bake file and the context changed, and the targets."""

    bake_file: str
    changed: bool
    context_changed: bool
    targets: list[BakedTarget]


def write(root: Path, bake: Bake) -> Baked:
    """Write the bake file and its context (each only when it differs)."""
    changed = write_bake(root, bake)
    context_changed = write_context(root, bake)
    targets = [BakedTarget(t.variant, list(t.tags), list(t.platforms), list(t.layers)) for t in bake.targets]
    return Baked(BAKE_FILE, changed, context_changed, targets)


def context_problems(root: Path, bake: Bake) -> list[str] | None:
    """None when there is no context dir; else what differs from the expected one."""
    target = root / CONTEXT_DIR
    if not target.is_dir():
        return None
    have = {str(p.relative_to(target)): p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()}
    problems = [f"{CONTEXT_DIR}/{p}: missing" for p in sorted(set(bake.context) - set(have))]
    problems += [f"{CONTEXT_DIR}/{p}: not in the plan" for p in sorted(set(have) - set(bake.context))]
    problems += [
        f"{CONTEXT_DIR}/{p}: content differs"
        for p in sorted(set(have) & set(bake.context))
        if have[p] != bake.context[p]
    ]
    return problems


@dataclass(frozen=True)
class BakeChecked:
    """`bake --check`: what differs between the bake file and its context on disk and the plan; `ok`: nothing."""

    ok: bool = derived()
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", not self.problems)


def check(root: Path, bake: Bake) -> BakeChecked:
    path = root / BAKE_FILE
    problems = []
    if not path.is_file():
        problems.append(f"{BAKE_FILE} is missing")
    elif path.read_text() != bake.text:
        problems.append(f"{BAKE_FILE} is out of date (patches/, images/ or images.lock changed)")
    problems += context_problems(root, bake) or []
    return BakeChecked(problems=problems)
