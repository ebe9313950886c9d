"""A variant's builds as the engine holds them (`history`), and putting its moving tags back on one (`rollback`).

The engine is the source: every local image labelled `imgbuild.variant=VARIANT` whose tag in the variant's
repository is an immutable one, `<version>-<digest12>`. Its inputs come from its labels. Two things the engine
does not keep are said plainly: when a build happened (labels carry `created`, the newest input's date, so equal
inputs give equal digests; the engine's LastTagTime is when any tag of the image was last written, a rollback's
too) and whether its smoke test passed (`smoke/record.py`, by image id). Selection and the entries are pure;
`read`, `rollback` and `move_local` touch the engine, `read_registry` and `move_registry` the registry.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field

from imgbuild.config.models import SmokeSpec
from imgbuild.deploy.profiles import PROFILES_FILE, load_profiles
from imgbuild.deploy.profiles import profile as profile_of
from imgbuild.deploy.recipes import Pinned, Recipe, write_recipe
from imgbuild.engine import Engine, ImageInfo
from imgbuild.errors import DockerError, RegistryError, SmokeError, UsageError
from imgbuild.patches.variants import ResolvedVariant
from imgbuild.plan import labels as lbl
from imgbuild.project import Project
from imgbuild.registry import reference, tools
from imgbuild.shapes import EmptyIsNull, added_later, derived, dump, named
from imgbuild.smoke import record
from imgbuild.smoke.checks import expected_from_labels, smoke
from imgbuild.smoke.record import SmokeRecord
from imgbuild.smoke.report import SmokeReport

VARIANT = f"{lbl.PREFIX}variant"
Importers = Callable[[tuple[str, ...]], list[str]]  # planned files -> the release's modules importing them


@dataclass(frozen=True)
class InRegistry:
    ref: str  # REG/REPO:<immutable tag>
    digest: str | None  # what it names there (None: absent)
    moving: tuple[str, ...]  # the registry's moving refs that name that digest


@dataclass(frozen=True)
class HistoryUpstream:  # a pin the image was built from
    name: str
    url: str
    tag: str
    commit: str


@dataclass(frozen=True)
class Base:  # the image's base; one with no registry origin (a stand-in) by its local name, with no digest
    name: str
    digest: str | None


SmokeState = Literal["passed", "failed", "unknown"]


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One build of the variant in the local store."""

    ref: str  # REPO:<version>-<digest12>
    image_id: str  # on the containerd store: the digest a push keeps
    kind: Literal["image", "join"]  # one platform, or the multi-platform image over the variant's platforms
    platforms: Annotated[dict[str, str], Field(description="platform -> that platform's image id")]
    parts: Annotated[dict[str, str], Field(description="platform -> that platform's immutable tag")]  # a join's
    version: str
    upstreams: tuple[HistoryUpstream, ...]
    series: str
    patches: dict[str, Literal["applied", "reverted"]]
    base: Base
    created: Annotated[str, Field(description="the newest input's date (labels carry no wall clock)")]
    inputs: str
    last_tagged: Annotated[
        EmptyIsNull,
        Field(description="the engine's LastTagTime: when any tag of the image was last written"),
    ]  # the last tag written on this image (a moving one too)
    # passed (every platform), failed (one did), or unknown (no record: --no-smoke, or tested elsewhere)
    smoke_state: Annotated[SmokeState, Field(serialization_alias="smoke")] = derived("unknown")  # noqa: RUF009
    # platform -> its last full smoke test here (None: none recorded)
    smoke: Annotated[dict[str, SmokeRecord | None], Field(serialization_alias="smoke_records")]
    moving: tuple[str, ...] = ()  # the variant's moving refs that name it now
    registry: InRegistry | None = None  # --registry: what the registry has under its immutable tag

    def __post_init__(self) -> None:
        found = list(self.smoke.values())
        state: SmokeState = "unknown"
        if any(r is not None and not r.ok for r in found):
            state = "failed"
        elif found and all(r is not None for r in found):
            state = "passed"
        object.__setattr__(self, "smoke_state", state)


@dataclass(frozen=True)
class RegistryMoving:  # --registry: the variant's moving tags as the registry has them
    registry: str
    moving: dict[str, str | None]  # REG/REPO:tag -> digest there
    # REG/REPO:tag naming an index -> platform -> the local entry of that manifest (its ref), else the digest
    platforms: Annotated[
        dict[str, dict[str, str]],
        added_later(
            "each moving tag that names an index: platform -> the local build of that manifest (its immutable "
            "tag), or the digest when none is here (a publish of some platforms keeps the others)"
        ),
    ] = field(default_factory=dict)


ORDER = "newest first by created (the inputs' date), then by the engine's last tag time"


@dataclass(frozen=True, kw_only=True)
class History:
    """A variant's builds in the local store, newest first."""

    variant: str
    repository: str
    order: str = ORDER
    moving: dict[str, str | None]  # moving ref -> the image id it names now (None: nothing)
    registry: RegistryMoving | None = None
    entries: tuple[Entry, ...]  # newest first

    def find(self, image_id: str) -> Entry | None:
        return next((e for e in self.entries if e.image_id == image_id), None)


def _json(value: str | None, default: object) -> object:
    try:
        return json.loads(value) if value else default
    except ValueError:
        return default


def upstreams_of(labels: Mapping[str, str]) -> tuple[HistoryUpstream, ...]:
    """Every pin the image was built from: `imgbuild.upstreams` (several pins), else `imgbuild.upstream.*`."""
    many = _json(labels.get(lbl.UPSTREAMS), None)
    if isinstance(many, list) and many:
        return tuple(
            HistoryUpstream(
                name=str(u.get("name", "")),
                url=str(u.get("url", "")),
                tag=str(u.get("tag", "")),
                commit=str(u.get("commit", "")),
            )
            for u in many
            if isinstance(u, dict)
        )
    return (
        HistoryUpstream(
            name="",
            url=labels.get(f"{lbl.PREFIX}upstream.url", ""),
            tag=labels.get(f"{lbl.PREFIX}upstream.tag", ""),
            commit=labels.get(f"{lbl.PREFIX}upstream.commit", ""),
        ),
    )


def immutable_tags(info: ImageInfo, repository: str) -> list[str]:
    """The image's tags in `repository` that are immutable: `<version>-<12 hex>`, the version its label's."""
    version = info.labels.get(f"{lbl.OCI}version", "")
    out = []
    for ref in info.tags:
        repo, _, tag = ref.rpartition(":")
        head, dash, digest = tag.rpartition("-")
        if repo == repository and dash and head == version and len(digest) == 12 and _hex(digest):
            out.append(ref)
    return out


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _same_build(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    keys = (f"{lbl.PREFIX}upstream.commit", f"{lbl.PREFIX}series", f"{lbl.PREFIX}patches", f"{lbl.PREFIX}files")
    return all(a.get(k) == b.get(k) for k in keys)


def entries(
    infos: Sequence[ImageInfo],
    repository: str,
    variant: str,
    moving: Mapping[str, str | None],
    smoke_of: Callable[[str], SmokeRecord | None],
) -> list[Entry]:
    """The builds of `variant` in `repository` among `infos`, newest first (pure but for `smoke_of`).

    An image's immutable tag ends in its `imgbuild.inputs` digest; a join's does not (the engine shows a join
    with its host platform's config, so its labels are a part's): its parts are the one-platform builds with
    the same release, series, patches and files."""
    mine = [i for i in infos if i.labels.get(VARIANT) == variant and lbl.INPUTS in i.labels]
    singles: list[tuple[str, ImageInfo]] = []
    joins: list[tuple[str, ImageInfo]] = []
    for info in mine:
        for ref in immutable_tags(info, repository):
            own = ref.rpartition("-")[2] == info.labels[lbl.INPUTS].removeprefix("sha256:")[:12]
            (singles if own else joins).append((ref, info))
    out = [_entry(ref, info, "image", {str(info.platform): (ref, info)}, moving, smoke_of) for ref, info in singles]
    for ref, info in joins:
        parts = {str(i.platform): (r, i) for r, i in singles if _same_build(i.labels, info.labels)}
        # its platforms' images untagged since: the join as the engine shows it (the host's platform)
        out.append(_entry(ref, info, "join", parts or {str(info.platform): (ref, info)}, moving, smoke_of))
    return sorted(out, key=lambda e: (e.created, e.last_tagged, e.ref), reverse=True)


def _entry(
    ref: str,
    info: ImageInfo,
    kind: Literal["image", "join"],
    parts: Mapping[str, tuple[str, ImageInfo]],
    moving: Mapping[str, str | None],
    smoke_of: Callable[[str], SmokeRecord | None],
) -> Entry:
    lab = info.labels
    patches = _json(lab.get(f"{lbl.PREFIX}patches"), {})
    return Entry(
        ref=ref,
        image_id=info.id,
        kind=kind,
        platforms={p: i.id for p, (_, i) in sorted(parts.items())},
        parts={p: r for p, (r, _) in sorted(parts.items())},
        version=lab.get(f"{lbl.OCI}version", ""),
        upstreams=upstreams_of(lab),
        series=lab.get(f"{lbl.PREFIX}series", ""),
        patches={str(k): "applied" if v == "applied" else "reverted" for k, v in patches.items()}
        if isinstance(patches, dict)
        else {},
        base=Base(
            name=lab.get(f"{lbl.OCI}base.name") or lab.get(lbl.BASE_LOCAL, ""),
            digest=lab.get(f"{lbl.OCI}base.digest"),
        ),
        created=lab.get(f"{lbl.OCI}created", ""),
        inputs=lab[lbl.INPUTS],
        last_tagged=info.last_tagged,
        smoke={p: smoke_of(i.id) for p, (_, i) in sorted(parts.items())},
        moving=tuple(r for r, i in moving.items() if i == info.id),
    )


def refs_of(variant: ResolvedVariant, repository: str | None) -> tuple[str, tuple[str, ...]]:
    """The variant's repository (`repository` first) and its moving refs."""
    repo = variant.repository(repository, takes_repository=True)
    return repo, tuple(f"{repo}:{t}" for t in variant.image.tags or ())


def read(engine: Engine, variant: ResolvedVariant, repository: str | None = None) -> History:
    repo, moving = refs_of(variant, repository)
    named = {}
    for ref in moving:
        info = engine.image(ref)
        named[ref] = info.id if info else None
    found = entries(engine.labelled(VARIANT, variant.name), repo, variant.name, named, record.recorded)
    return History(variant=variant.name, repository=repo, moving=named, entries=tuple(found))


def registry_name(registry: str, repository: str) -> str:
    """`REG/REPO` as the registry names the repository."""
    return reference.join(registry, repository).name


def read_registry(history: History, registry: str) -> History:
    """`history` with each build's immutable tag and each moving tag looked up in `registry` (one inspect each)."""
    name = registry_name(registry, history.repository)
    moving: dict[str, str | None] = {}
    platforms: dict[str, dict[str, str]] = {}
    by_id = {e.image_id: e.ref for e in history.entries}  # a push keeps the digest: the registry's is the local id
    for ref in history.moving:
        found = tools.inspect(f"{name}:{ref.rpartition(':')[2]}")
        moving[f"{name}:{ref.rpartition(':')[2]}"] = found.digest if found else None
        if found is not None and found.is_index:  # a join, or an index a publish of some platforms left
            entries = tools.platforms_at(found)
            platforms[f"{name}:{ref.rpartition(':')[2]}"] = {p: by_id.get(d, d) for p, d in entries.items()}
    out = []
    for e in history.entries:
        there = f"{name}:{e.ref.rpartition(':')[2]}"
        found = tools.inspect(there)
        digest = found.digest if found else None
        named = [r for r, d in moving.items() if digest is not None and d == digest]
        out.append(replace(e, registry=InRegistry(there, digest, tuple(named))))
    return replace(history, entries=tuple(out), registry=RegistryMoving(registry, moving, platforms))


# -- rollback ----------------------------------------------------------------------
def target_ref(repository: str, to: str) -> str:
    """What `--to` names: a digest or id (`sha256:...`, `REPO@sha256:...`), a full `REPO:TAG`, or a tag of
    the variant's repository."""
    if to.startswith("sha256:") or "@sha256:" in to:
        return "sha256:" + to.rpartition("sha256:")[2]
    last = to.rpartition("/")[2]
    return to if ":" in last else f"{repository}:{to}"


def check_target(info: ImageInfo | None, ref: str, history: History) -> Entry:
    """The entry a rollback may move the moving tags to; anything else is refused with why (a UsageError)."""
    where = f"`imgbuild history {history.variant}` lists the builds rollback accepts"
    if info is None:
        raise UsageError(f"--to: no image {ref} in the local image store", hint=where)
    if lbl.INPUTS not in info.labels or VARIANT not in info.labels:
        raise UsageError(
            f"--to: {ref} ({info.id[7:19]}) has no imgbuild labels (imgbuild.variant, imgbuild.inputs): imgbuild did "
            "not build it, so nothing says what it holds; nothing was moved",
            hint=where,
        )
    other = info.labels[VARIANT]
    if other != history.variant:
        raise UsageError(
            f"--to: {ref} is an image of variant {other}, not {history.variant}; nothing was moved",
            hint=f"`imgbuild rollback {other} --to {ref}` moves {other}'s tags; {where}",
        )
    found = history.find(info.id)
    if found is None:
        raise UsageError(
            f"--to: {ref} ({info.id[7:19]}) has no immutable tag in {history.repository}; nothing was moved",
            hint=where,
        )
    return found


@named("Move")
@dataclass(frozen=True)
class TagMove:
    # A moving tag `ref` moved (by rollback, locally or in a registry) from the image `before` to `after`.

    ref: str
    before: Annotated[str | None, Field(serialization_alias="from")]  # the image id it named (None: nothing)
    after: Annotated[str, Field(serialization_alias="to")]
    moved: bool = derived()

    def __post_init__(self) -> None:
        object.__setattr__(self, "moved", self.before != self.after)


@dataclass(frozen=True)
class PinnedRecipe:  # a recipe pinned to the target: `path` where --recipe rewrote it, else None (not written)
    profile: str
    path: str | None
    text: str


@dataclass(frozen=True, kw_only=True)
class Rollback:
    """A variant's tags moved back to one of its builds."""

    variant: str
    target: Entry
    pinned: Annotated[
        str, Field(description="what the recipe pins: the immutable tag, or REG/REPO@digest with --registry")
    ]
    smoked: bool = derived()
    smoke: tuple[SmokeReport, ...]  # empty: --no-smoke
    moves: tuple[TagMove, ...]
    registry_moves: tuple[TagMove, ...]
    recipes: tuple[PinnedRecipe, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "smoked", bool(self.smoke))

    def with_recipes(self, recipes: Sequence[Recipe], *, rewritten: bool) -> Rollback:
        """The rollback with its pinned recipes (`pin_recipes`): their paths when `rewritten` (`--recipe`)."""
        pinned = tuple(PinnedRecipe(r.profile.name, str(r.path) if rewritten else None, r.text()) for r in recipes)
        return replace(self, recipes=pinned)


def smoke_target(
    engine: Engine, target: Entry, spec: SmokeSpec | None, importers: Importers | None
) -> list[SmokeReport]:
    """Each platform's image of the target against its own labels and the variant's smoke commands."""
    reports = []
    for ref in target.parts.values():
        expected = expected_from_labels(engine.require(ref))
        finder = None if importers is None else functools.partial(importers, tuple(f.path for f in expected.files))
        reports.append(smoke(engine, ref, replace(expected, smoke=spec, importers=finder)))
    return reports


def move_local(engine: Engine, history: History, target: Entry) -> list[TagMove]:
    """Point every moving tag at `target`; on a failure put back those already moved, then raise."""
    moves: list[TagMove] = []
    try:
        for ref, before in history.moving.items():
            if before != target.image_id:
                engine.tag(target.image_id, ref)
            moves.append(TagMove(ref, before, target.image_id))
    except BaseException:
        restore(engine, moves)
        raise
    return moves


def restore(engine: Engine, moves: Sequence[TagMove]) -> None:
    for m in reversed(moves):
        if m.before == m.after:
            continue
        with contextlib.suppress(DockerError):  # the daemon may be gone: the error that stopped us is the news
            if m.before is None:
                engine.untag(m.ref)
            else:
                engine.tag(m.before, m.ref)


def registry_source(history: History, target: Entry, registry: str) -> tools.Manifest:
    """What the registry holds under the target's immutable tag: it must be there at the local digest."""
    there = f"{registry_name(registry, history.repository)}:{target.ref.rpartition(':')[2]}"
    found = tools.inspect(there)
    if found is None:
        raise RegistryError(
            f"{there} is not in the registry, so its moving tags cannot point at it there; nothing was moved",
            hint=f"publish that build first (`imgbuild publish {history.variant} --registry {registry}`), "
            "or roll back locally (no --registry)",
        )
    if found.digest != target.image_id:
        raise RegistryError(
            f"{there} is {found.digest} in the registry, not the local {target.image_id}; nothing was moved",
            hint="the registry holds another image under that tag; publish this build again",
        )
    return found


def move_registry(history: History, registry: str, source: tools.Manifest) -> list[TagMove]:
    """Point every moving tag in the registry at `source`, digest kept: an index (a multi-platform build) by one
    `imagetools create` for all of them; a lone manifest by a `docker push` of each tag (buildx 0.13's
    `imagetools create` wraps a lone manifest in a new list, another digest), which sends no layer again."""
    name = registry_name(registry, history.repository)
    targets = [f"{name}:{ref.rpartition(':')[2]}" for ref in history.moving]
    before = {t: (found.digest if (found := tools.inspect(t)) else None) for t in targets}
    todo = [t for t in targets if before[t] != source.digest]
    if todo and source.is_index:
        tools.copy_tags(f"{name}@{source.digest}", todo)
    for t in todo if not source.is_index else ():
        pushed = tools.push(source.digest, t)
        if pushed != source.digest:
            raise RegistryError(f"{t}: the push gave {pushed}, not {source.digest}", hint="is the engine's image store "
                                "the containerd one (`docker info`)?")  # fmt: skip
    return [TagMove(t, before[t], source.digest) for t in targets]


def rollback(
    engine: Engine,
    history: History,
    to: str,
    *,
    spec: ResolvedVariant | None,
    importers: Importers | None = None,
    run_smoke: bool = True,
    registry: str | None = None,
) -> Rollback:
    """Check the target, smoke it (each platform), then move the moving tags: locally, then in `registry`. A
    refusal, a failing smoke test or a registry that does not have the target moves nothing."""
    ref = target_ref(history.repository, to)
    target = check_target(engine.image(ref), ref, history)
    source = registry_source(history, target, registry) if registry else None
    reports: list[SmokeReport] = []
    if run_smoke:
        reports = smoke_target(engine, target, spec.smoke if spec else None, importers)
        failed = [r for r in reports if not r.ok]
        if failed:
            checks = [f"{c.group} {c.name}: {c.detail}" for r in failed for c in r.failures]
            raise SmokeError(
                f"{target.ref} failed its smoke test ({len(checks)} failing checks: {'; '.join(checks[:4])}); "
                f"{', '.join(history.moving) or 'no moving tag'} left unchanged",
                hint=f"`imgbuild smoke {target.ref}` reports every check; pick another build "
                f"(`imgbuild history {history.variant}`)",
                details={"smoke": dump(failed[0])},
            )
    moves = move_local(engine, history, target)
    registry_moves: list[TagMove] = []
    if registry and source:
        try:
            registry_moves = move_registry(history, registry, source)
        except BaseException:
            restore(engine, moves)
            raise
    pinned = f"{registry_name(registry, history.repository)}@{source.digest}" if registry and source else target.ref
    return Rollback(
        variant=history.variant,
        target=target,
        pinned=pinned,
        smoke=tuple(reports),
        moves=tuple(moves),
        registry_moves=tuple(registry_moves),
    )


def pin_recipes(project: Project, result: Rollback, recipe: Path | None) -> list[Recipe]:
    """The sparkrun recipe pinned to the rollback's target: `recipe` rewritten (its profile from its own
    metadata), or else one per launch profile of the variant, rendered and not written."""
    local = not result.pinned.partition("@")[2]
    pinned = Pinned(result.pinned, result.target.image_id if local else None, f"rollback to {result.target.ref}")
    if recipe is not None:
        try:
            doc = yaml.safe_load(recipe.read_text(encoding="utf-8"))
            meta = doc["metadata"]["imgbuild"]
            variant, profile = str(meta["variant"]), str(meta["profile"])
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            raise UsageError(
                f"--recipe {recipe}: not a recipe `imgbuild recipe` wrote ({type(exc).__name__}: {exc})",
                hint=f"write one first: imgbuild recipe {result.variant} --profile NAME",
            ) from exc
        if variant != result.variant:
            raise UsageError(f"--recipe {recipe} runs variant {variant}, not {result.variant}; nothing was written")
        return [write_recipe(project, variant, profile, out=recipe.parent, pinned=pinned, path=recipe)]
    if not (project.root / PROFILES_FILE).is_file():
        return []
    names = sorted(load_profiles(project.root)[1].profiles)
    mine = [n for n in names if profile_of(project.root, n).variant == result.variant]
    return [write_recipe(project, result.variant, n, out=project.root, pinned=pinned, write=False) for n in mine]
