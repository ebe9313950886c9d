"""`imgbuild publish`: ask the registry first, build and smoke-test locally, then `docker push` each platform image
and the join of every variant, and the moving tags last. On the containerd store a push keeps the local digest
(anything else is an error).

A moving tag keeps the platforms a publish does not make: publishing linux/arm64 alone over a tag that names an
index of arm64 and amd64 writes a new index (`docker buildx imagetools create` over the manifests, by digest) with
the new arm64 manifest beside the amd64 one it had. A failure at any step puts the local moving tags back."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from imgbuild.builder import runner as build
from imgbuild.builder.options import BuildOptions
from imgbuild.builder.result import BuildResult
from imgbuild.engine import Engine
from imgbuild.errors import ConfigError, DockerError, RegistryError
from imgbuild.plan.labels import INPUTS
from imgbuild.platforms import Platform
from imgbuild.progress import Say, to_stderr
from imgbuild.project import Project, Selection
from imgbuild.publish import sbom as sbommod
from imgbuild.publish import signing
from imgbuild.registry import reference, tools
from imgbuild.shapes import Seconds, hidden

if TYPE_CHECKING:
    from imgbuild.plan.builds import BuildPlan

STORE_HINT = (
    "publishing needs Docker 26+ with the containerd image store "
    '({"features": {"containerd-snapshotter": true}} in daemon.json), where a push keeps the local digest'
)
NOT_BUILT = "(not built)"


def split_ref(local: str) -> tuple[str, str]:
    """`repo:tag` -> (`repo`, `tag`); a registry port is not a tag."""
    name, sep, tag = local.rpartition(":")
    if not sep or "/" in tag or not name:
        raise ConfigError(f"local image {local!r} has no tag")
    return name, tag


@dataclass(frozen=True)
class Push:
    # One tag to put in the registry: the local image under `local`, with id `digest`, as `target` (`ref`).

    local: str
    # the local id: on the containerd store, the manifest (or index) digest the registry gets
    digest: Annotated[str, Field(serialization_alias="manifest")]
    name: Annotated[str, hidden()]  # REG/repo, where it goes (under the local tag)
    platforms: Annotated[tuple[Platform, ...], hidden()]  # one, or several for a join
    inputs_digest: Annotated[str, Field(serialization_alias="inputs")] = ""
    labels: Annotated[dict[str, str], hidden()] = field(default_factory=dict, repr=False, compare=False)
    ref: str = field(default="", kw_only=True)  # derived: `name` under the local tag

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", f"{self.name}:{split_ref(self.local)[1]}")

    @property
    def target(self) -> str:
        return self.ref

    @property
    def platform(self) -> str:
        """As people and the JSON name it: `linux/arm64`, or `linux/arm64,linux/amd64` for a join."""
        return ",".join(map(str, self.platforms))


def merged(before: Mapping[str, str] | None, new: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """What a moving tag names after a publish of `new` (platform -> manifest digest) over `before` (what it
    names now; None: nothing): the new platforms beside the others it had, and those kept (pure)."""
    kept = {p: d for p, d in (before or {}).items() if p not in new}
    return dict(sorted({**new, **kept}.items())), tuple(sorted(kept))


@dataclass(frozen=True)
class MovingIndex:
    """A registry moving tag, platform -> manifest digest: `before` as the registry had it when the tag was written
    (a dry run: now; null: no such tag, or in a dry run a registry that did not answer), `after` with the platforms
    this publish does not make `kept`"""

    ref: str
    before: dict[str, str] | None
    after: dict[str, str]
    kept: tuple[str, ...]  # platforms this publish does not make, kept from `before` by digest


@dataclass(frozen=True)
class VariantPublish:
    variant: str
    name: str  # REG/repo, no tag
    images: tuple[Push, ...]  # one per platform
    top: Push  # what the moving tags name: the one platform's image, or the join
    moving_tags: tuple[str, ...]
    # moving ref -> what the registry had there (a dry run: now; a publish: when it wrote the tag)
    before: Mapping[str, dict[str, str] | None] = field(default_factory=dict)

    @property
    def moving_refs(self) -> list[str]:
        return [f"{self.name}:{t}" for t in self.moving_tags]

    @property
    def new(self) -> dict[str, str]:
        """platform -> the manifest this publish puts there."""
        return {p.platform: p.digest for p in self.images}

    def indexes(self) -> list[MovingIndex]:
        """Each moving tag before and after."""
        return [
            MovingIndex(ref, self.before.get(ref), *merged(self.before.get(ref), self.new)) for ref in self.moving_refs
        ]

    def planned(self) -> VariantPlanned:
        """What `publish --dry-run --json` prints of it."""
        return VariantPlanned(**self._shown())

    def published(self, outcome: Outcome) -> VariantPublished:
        """What `publish --json` prints of it, with what the publish did."""
        o = outcome
        return VariantPublished(
            **self._shown(), digest=o.digest, state=o.state, pushed=tuple(o.pushed), moved=tuple(o.moved),
            kept=tuple(o.kept),
        )  # fmt: skip

    def _shown(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "repository": self.name,
            "immutable": self.top.target,
            "moving": tuple(self.moving_refs),
            "platforms": {p.platform: p for p in self.images},
            "moving_index": tuple(self.indexes()),
        }


@dataclass(frozen=True)
class VariantPlanned:
    # a variant as a publish plans it: where each platform's image goes, and each moving tag before and after

    variant: str
    repository: str
    immutable: str
    moving: tuple[str, ...]
    platforms: dict[str, Push]
    moving_index: tuple[MovingIndex, ...]


State = Literal["published", "unchanged", "retagged"]


@dataclass(frozen=True)
class VariantPublished(VariantPlanned):
    # ... and what the publish did: the digest the moving tags name, pushed, moved, kept

    digest: str
    state: State
    pushed: tuple[str, ...]
    moved: tuple[str, ...]
    kept: tuple[str, ...]


def plan_built(
    result: BuildResult, registry: str, repository: str | None, found: dict[str, dict[str, str]]
) -> list[VariantPublish]:
    """What goes where (pure, given what the build made and each image's labels by id)."""
    out = []
    for variant in dict.fromkeys(img.variant for img in result.images):
        imgs = [img for img in result.images if img.variant == variant]
        name = reference.join(registry, repository or split_ref(imgs[0].immutable)[0]).name
        pushes = tuple(
            Push(i.immutable, i.image_id, name, (i.platform,), i.inputs_digest, found.get(i.image_id, {})) for i in imgs
        )
        last = imgs[-1]
        platforms = tuple(i.platform for i in imgs)
        top = Push(last.index_ref, last.index, name, platforms) if last.index_ref else pushes[-1]
        out.append(VariantPublish(variant, name, pushes, top, tuple(split_ref(r)[1] for r in last.moving)))
    return out


def current(engine: Engine | None, plan: BuildPlan) -> dict[str, str]:
    """immutable ref -> local id of the plan's images already built (a one-platform image whose inputs label is
    the plan's; a join under its immutable tag, whose digest covers its parts' immutable tags)."""
    if engine is None:
        return {}
    out: dict[str, str] = {}
    for ib in plan.images:
        if (info := engine.image(ib.immutable_ref)) is not None and info.labels.get(INPUTS) == ib.inputs_digest:
            out[ib.immutable_ref] = info.id
    for join in plan.joins:
        if (info := engine.image(join.immutable_ref)) is not None:
            out[join.immutable_ref] = info.id
    return out


def plan_dry(
    plan: BuildPlan, registry: str, repository: str | None, have: Mapping[str, str] | None = None
) -> list[VariantPublish]:
    """Where each image would go, from the build plan: `have`, the local ids of those already built (the others
    are NOT_BUILT)."""
    out = []
    have = have or {}
    joins = {j.variant: j for j in plan.joins}
    for variant in dict.fromkeys(ib.variant for ib in plan.images):
        parts = [ib for ib in plan.images if ib.variant == variant]
        name = reference.join(registry, repository or parts[0].repository).name
        pushes = tuple(
            Push(ib.immutable_ref, have.get(ib.immutable_ref, NOT_BUILT), name, (ib.platform,), ib.inputs_digest)
            for ib in parts
        )
        join = joins.get(variant)
        platforms = tuple(ib.platform for ib in parts)
        top = Push(join.immutable_ref, have.get(join.immutable_ref, NOT_BUILT), name, platforms) if join else pushes[0]
        out.append(
            VariantPublish(variant, name, pushes, top, tuple(join.moving_tags if join else parts[0].moving_tags))
        )
    return out


@dataclass(frozen=True)
class Outcome:
    digest: str  # what the moving tags name in the registry
    state: State
    pushed: list[str]
    moved: list[str]
    kept: list[str] = field(default_factory=list)  # platforms a moving tag kept (this publish did not make them)


_ASK = tools.Manifest("", b"")  # _push's `have` when the caller has not read the target yet


def _push(push: Push, target: str, say: Say, *, name: str = "", have: tools.Manifest | None = _ASK) -> bool:
    """Push `push` as `target` unless the registry has it at its digest (a join's moving tag is copied from
    the index pushed to `name`, one write); whether it pushed. `have`: what the target names, already read."""
    have = tools.inspect(target) if have is _ASK else have
    if have is not None and have.digest == push.digest:
        return False
    say(f"pushing {push.local} ({push.platform}) as {target}")
    if name and len(push.platforms) > 1:
        tools.copy_tag(f"{name}@{push.digest}", target)
        pushed = tools.inspect_required(target).digest
    else:
        pushed = tools.push(push.local, target)
    if pushed != push.digest:
        raise RegistryError(f"{target}: the registry got {pushed}, but the local image is {push.digest}",
                            hint=STORE_HINT)  # fmt: skip
    return True


def push_immutable(vp: VariantPublish, say: Say) -> list[str]:
    """Each platform's image, then the join (several platforms), under their immutable tags: what it pushed."""
    immutable = [*vp.images, *((vp.top,) if vp.top not in vp.images else ())]
    return [p.target for p in immutable if _push(p, p.target, say)]


def move_tag(vp: VariantPublish, ref: str, say: Say) -> tuple[MovingIndex, str, bool]:
    """Point the moving tag `ref` at the variant's images, keeping the platforms it names that this publish does
    not make (a new index over the manifests, by digest): (before and after, the digest it names, moved?)."""
    now = tools.inspect(ref)
    if now is None:
        before = None
    elif not now.is_index and now.digest in vp.new.values():  # one of this publish's own images: its platform known
        before = {p: d for p, d in vp.new.items() if d == now.digest}
    else:
        before = tools.platforms_at(now)
    after, kept = merged(before, vp.new)
    seen = MovingIndex(ref, before, after, kept)
    if not kept:
        return seen, vp.top.digest, _push(vp.top, ref, say, name=vp.name, have=now)
    assert now is not None  # kept platforms came from it
    if now.is_index and before == after:
        return seen, now.digest, False
    say(f"{ref}: {', '.join(vp.new)} beside {', '.join(kept)} (kept), as one index")
    tools.create_index(ref, [f"{vp.name}@{d}" for d in after.values()])
    got = tools.inspect_required(ref)
    if tools.platforms_at(got) != after:
        raise RegistryError(f"{ref}: the registry's index names {tools.platforms_at(got)}, not {after}")
    return seen, got.digest, True


def push_variant(vp: VariantPublish, say: Say) -> tuple[VariantPublish, Outcome]:
    """One variant: its immutable tags, then its moving tags, last."""
    return move_variant(vp, push_immutable(vp, say), say)


def move_variant(vp: VariantPublish, pushed: list[str], say: Say) -> tuple[VariantPublish, Outcome]:
    """The variant's moving tags; the variant with each tag's `before` as read when it was written."""
    digest, moved, kept, before = vp.top.digest, list[str](), set[str](), dict[str, dict[str, str] | None]()
    for ref in vp.moving_refs:
        seen, digest, did = move_tag(vp, ref, say)
        moved += [ref.rsplit(":", 1)[1]] if did else []
        kept.update(seen.kept)
        before[ref] = seen.before
    say(f"{vp.variant}: {vp.top.target} -> {vp.top.digest}" + ("" if pushed or moved else ", already published"))
    state: State = "published" if pushed else "retagged" if moved else "unchanged"
    return replace(vp, before=before), Outcome(digest, state, pushed, moved, sorted(kept))


def push_all(plan: Sequence[VariantPublish], say: Say) -> list[tuple[VariantPublish, Outcome]]:
    """Every variant's immutable tags first, then every moving tag: a failure while pushing images moves none."""
    pushed = [push_immutable(vp, say) for vp in plan]
    return [move_variant(vp, p, say) for vp, p in zip(plan, pushed, strict=True)]


def read_moving(plan: Sequence[VariantPublish], *, strict: bool) -> list[VariantPublish]:
    """Each variant with what the registry's moving tags name now. `strict`: a registry that does not answer or
    refuses the credentials is a RegistryError (a publish asks before it builds anything); else (a dry run)
    it is said as `before` None."""
    out = []
    for vp in plan:
        before: dict[str, dict[str, str] | None] = {}
        for ref in vp.moving_refs:
            try:
                found = tools.check_access(ref)
            except RegistryError:
                if strict:
                    raise
                found = None
            if not strict:  # a publish reads each tag again when it writes it, and says it as it was then
                before[ref] = tools.platforms_at(found) if found is not None else None
        out.append(replace(vp, before=before))
    return out


@contextlib.contextmanager
def local_tags_kept(engine: Engine, refs: Sequence[str], say: Say) -> Iterator[None]:
    """On a failure, put the local moving tags `refs` back on what they named before (or remove them)."""
    before = {ref: (info.id if (info := engine.image(ref)) else None) for ref in dict.fromkeys(refs)}
    try:
        yield
    except BaseException:
        for ref, image_id in before.items():
            try:
                now = engine.image(ref)
                if image_id is None and now is not None:
                    engine.untag(ref)
                elif image_id is not None and (now is None or now.id != image_id):
                    engine.tag(image_id, ref)
            except DockerError as exc:  # the daemon may be gone: say what to do
                fix = f"docker tag {image_id} {ref}" if image_id else f"docker image rm --no-prune {ref}"
                say(f"could not put {ref} back to {image_id or 'nothing'}: {exc.message}; to do it: {fix}")
        raise


def attach(
    plan: Sequence[VariantPublish], key: Path, *, sbom: bool, sign: bool, say: Say, named: Sequence[str] = ()
) -> list[str]:
    """An SPDX SBOM attested on each platform's manifest, then a signature on what the moving tags name (`named`,
    per variant: an index that kept other platforms is not the variant's own top)."""
    done = []
    for i, vp in enumerate(plan):
        top = named[i] if i < len(named) else vp.top.digest
        for p in vp.images if sbom else ():
            ref = f"{vp.name}@{p.digest}"
            signing.attest_sbom(ref, sbommod.render(sbommod.spdx(vp.name, p.platform, p.digest, p.labels)), key)
            done.append(f"sbom {ref}")
            say(f"{vp.variant} {p.platform}: SPDX SBOM attested on {p.digest[:19]}")
        if sign:
            ref = f"{vp.name}@{top}"
            signing.sign(ref, key)
            done.append(f"signature {ref}")
            say(f"{vp.variant}: {top[:19]} signed")
    return done


@dataclass
class PublishResult:
    """What a publish did (or, `outcomes` None, would do)."""

    plan: list[VariantPublish]
    outcomes: list[Outcome] | None = None
    attached: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def planned(self) -> PublishPlanned:
        """What `publish --dry-run --json` prints."""
        return PublishPlanned(variants=tuple(vp.planned() for vp in self.plan))

    def published(self) -> Published:
        """What `publish --json` prints (the outcomes of a publish that ran)."""
        assert self.outcomes is not None, "a dry run published nothing"
        done = tuple(vp.published(o) for vp, o in zip(self.plan, self.outcomes, strict=True))
        return Published(variants=done, attached=tuple(self.attached), seconds=self.seconds)


@dataclass(frozen=True, kw_only=True)
class PublishPlanned:
    dry_run: Literal[True] = True
    variants: tuple[VariantPlanned, ...]


@dataclass(frozen=True, kw_only=True)
class Published:
    variants: tuple[VariantPublished, ...]
    attached: tuple[str, ...]
    seconds: Seconds


def publish(
    project: Project,
    selection: Selection,
    registry: str,
    *,
    repository: str | None = None,
    base: str | None = None,
    key: Path | None = None,
    sbom: bool = False,
    sign: bool = False,
    dry_run: bool = False,
    say: Say = to_stderr,
) -> PublishResult:
    """Build (and smoke-test) locally, push each variant, then attach SBOMs and signatures (with `key`)."""
    t0 = time.perf_counter()
    # --repository is the images' repository, locally and in the registry (REG/REPO), as for `build`
    options = BuildOptions(base=base, repository=repository, smoke=True)
    if dry_run:
        try:
            maybe: Engine | None = Engine.connect()
        except DockerError:
            maybe = None
        planned = build.dry_plan(project, selection, options, maybe).plan
        dry = read_moving(plan_dry(planned, registry, repository, current(maybe, planned)), strict=False)
        return PublishResult(dry, seconds=time.perf_counter() - t0)
    engine = Engine.connect()
    ahead = build.dry_plan(project, selection, options, engine).plan
    # the registry answers and takes docker's credentials, before anything is built, smoke-tested or tagged
    read_moving(plan_dry(ahead, registry, repository), strict=True)
    local_moving = [ref for t in (*ahead.images, *ahead.joins) for ref in t.moving_refs]
    with local_tags_kept(engine, local_moving, say):
        built = build.build(engine, project, selection, options, say)
        found = {img.image_id: engine.require(img.image_id).labels for img in built.images}
        done = push_all(plan_built(built, registry, repository, found), say)
    plan, outcomes = [vp for vp, _ in done], [o for _, o in done]
    named = [o.digest for o in outcomes]
    attached = (
        attach(plan, key, sbom=sbom, sign=sign, say=say, named=named) if key is not None and (sbom or sign) else []
    )
    return PublishResult(plan, outcomes, attached, time.perf_counter() - t0)
