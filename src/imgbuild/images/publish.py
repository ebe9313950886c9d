"""`imgbuild publish`: build the variants locally, then put them in a registry with the engine's tools.

1. `images.build.build` makes (or finds current) every platform image of the
   selected variants and smoke-tests it, exactly as `imgbuild build` does.
2. Per platform: `docker push` of the local image under
   `REG/repo:<version>-<inputs>` (its local immutable tag). On the
   containerd image store the pushed manifest is the local one, so the
   registry's digest must equal the local image id; a push that says
   otherwise is an error. The registry skips blobs it already has.
3. `docker buildx imagetools create` joins the platforms, by digest, into
   one index under `<version>-<index inputs>`, the multi-platform immutable
   tag; `index_inputs` hashes the platforms' inputs digests.
4. Last, the variant's moving tags are pointed at that index, only those
   that do not already name it. A failure before leaves them as they were.

A variant whose index tag already lists exactly these manifests is left
alone (nothing pushed), apart from moving tags that drifted. The registry
commands are in `registry/tools.py`; SBOMs and signatures (cosign) are
attached to the pushed digests afterwards, as `--sbom`/`--sign` ask.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from imgbuild.errors import ConfigError, RegistryError
from imgbuild.images import labels, signing
from imgbuild.images import sbom as sbommod
from imgbuild.project import Project, Selection
from imgbuild.registry import reference, tools

if TYPE_CHECKING:
    from imgbuild.images.build import BuildOptions

INDEX_FORMAT = "imgbuild-index/1"
STORE_HINT = (
    "publishing needs Docker 26+ with the containerd image store "
    '({"features": {"containerd-snapshotter": true}} in daemon.json), where a push keeps the local digest'
)
Say = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


class LocalImage(Protocol):
    """One platform image in the local store, as `build` reports it (`ImageResult`)."""

    @property
    def variant(self) -> str: ...
    @property
    def platform(self) -> str: ...
    @property
    def image_id(self) -> str: ...
    @property
    def immutable(self) -> str: ...  # `repo:<version>-<inputs12>`
    @property
    def inputs_digest(self) -> str: ...


def index_inputs(per_platform: Mapping[str, str]) -> str:
    """One digest over the platforms' inputs digests: the tail of the index's immutable tag."""
    lines = [INDEX_FORMAT, *(f"{p} {d}" for p, d in sorted(per_platform.items()))]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def split_ref(local: str) -> tuple[str, str]:
    """`repo:tag` -> (`repo`, `tag`); a registry port is not a tag."""
    name, sep, tag = local.rpartition(":")
    if not sep or "/" in tag or not name:
        raise ConfigError(f"local image {local!r} has no tag")
    return name, tag


@dataclass(frozen=True)
class PlatformPush:
    platform: str
    local: str  # the local immutable ref
    image_id: str  # the local id: on the containerd store, the manifest digest the registry gets
    inputs_digest: str
    target: str  # REG/repo:<the local immutable tag>
    labels: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)  # the local image's

    def to_json(self) -> dict[str, object]:
        return {
            "local": self.local,
            "manifest": self.image_id,
            "inputs": self.inputs_digest,
            "ref": self.target,
        }


@dataclass(frozen=True)
class VariantPublish:
    variant: str
    name: str  # REG/repo, no tag
    images: tuple[PlatformPush, ...]  # sorted by platform
    immutable_tag: str  # the index's
    moving_tags: tuple[str, ...]

    @property
    def index_ref(self) -> str:
        return f"{self.name}:{self.immutable_tag}"

    @property
    def moving_refs(self) -> list[str]:
        return [f"{self.name}:{t}" for t in self.moving_tags]

    @property
    def annotations(self) -> dict[str, str]:
        """The index's: the images' OCI labels that every platform agrees on (base.digest differs, for one)."""
        per = [labels.oci_annotations(pi.labels) for pi in self.images]
        return {k: v for k, v in sorted(per[0].items()) if all(a.get(k) == v for a in per)} if per else {}

    def to_json(self) -> dict[str, object]:
        return {
            "variant": self.variant,
            "repository": self.name,
            "immutable": self.index_ref,
            "moving": self.moving_refs,
            "platforms": {pi.platform: pi.to_json() for pi in self.images},
        }


def plan_variants(
    images: Sequence[LocalImage],
    registry: str,
    version: str,
    moving: Mapping[str, Sequence[str]],
    repository: str | None = None,
    image_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> list[VariantPublish]:
    """What goes where (pure): per variant, its platform images and tags under `registry`
    (`image_labels`: each local image's labels, by its immutable ref)."""
    order: dict[str, list[LocalImage]] = {}
    for img in images:
        order.setdefault(img.variant, []).append(img)
    out = []
    for variant, imgs in order.items():
        imgs = sorted(imgs, key=lambda i: i.platform)
        local_repo = split_ref(imgs[0].immutable)[0]
        name = reference.join(registry, repository or local_repo).name
        pushes = tuple(
            PlatformPush(
                i.platform,
                i.immutable,
                i.image_id,
                i.inputs_digest,
                f"{name}:{split_ref(i.immutable)[1]}",
                (image_labels or {}).get(i.immutable, {}),
            )
            for i in imgs
        )
        combined = index_inputs({i.platform: i.inputs_digest for i in imgs})
        out.append(VariantPublish(variant, name, pushes, f"{version}-{combined[:12]}", tuple(moving[variant])))
    return out


@dataclass
class Outcome:
    variant: str
    index: str
    state: str  # "published", "unchanged", "retagged"
    pushed: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "state": self.state, "pushed": self.pushed, "moved": self.moved}


def _entries(vp: VariantPublish) -> list[tuple[str | None, str]]:
    return [(pi.platform, pi.image_id) for pi in vp.images]


def _matches(index: tools.Manifest | None, vp: VariantPublish) -> bool:
    return index is not None and index.is_index and sorted(index.entries(), key=str) == sorted(_entries(vp), key=str)


def push_variant(vp: VariantPublish, say: Say = _stderr) -> Outcome:
    """Push each platform, join them in an index under the immutable tag, then move the moving tags."""
    index = tools.inspect(vp.index_ref)
    outcome = Outcome(vp.variant, "", "unchanged")
    if not _matches(index, vp):
        for pi in vp.images:
            say(f"{vp.variant}: pushing {pi.local} ({pi.platform}) to {pi.target}")
            pushed = tools.push(pi.local, pi.target)
            if pushed != pi.image_id:
                raise RegistryError(
                    f"{pi.target}: the registry got manifest {pushed}, but the local image is {pi.image_id}",
                    hint=STORE_HINT,
                )
            outcome.pushed.append(pi.target)
        sources = [f"{vp.name}@{pi.image_id}" for pi in vp.images]
        tools.create_index([vp.index_ref], sources, vp.annotations)
        index = tools.inspect_required(vp.index_ref)
        if not _matches(index, vp):
            raise RegistryError(
                f"{vp.index_ref} lists {index.entries()}, not the pushed {_entries(vp)}",
                hint="another publish may have written the tag at the same time; publish again",
            )
        outcome.state = "published"
        say(f"{vp.variant}: {vp.index_ref} -> {index.digest}")
    assert index is not None
    outcome.index = index.digest
    stale = [ref for ref in vp.moving_refs if (cur := tools.inspect(ref)) is None or cur.digest != index.digest]
    if stale:
        tools.create_index(stale, [f"{vp.name}@{index.digest}"])
        outcome.moved = [ref.rsplit(":", 1)[1] for ref in stale]
        say(f"{vp.variant}: moved {', '.join(outcome.moved)}")
        if outcome.state == "unchanged":
            outcome.state = "retagged"
    elif outcome.state == "unchanged":
        say(f"{vp.variant}: {vp.index_ref} already published; nothing pushed")
    return outcome


def attach(
    plan: Sequence[VariantPublish],
    outcomes: Sequence[Outcome],
    key: Path,
    *,
    sbom: bool,
    sign: bool,
    say: Say = _stderr,
) -> list[str]:
    """After the push: an SPDX SBOM attested on each platform manifest, then a signature on each index."""
    done = []
    for vp, outcome in zip(plan, outcomes, strict=True):
        if sbom:
            for pi in vp.images:
                lab = pi.labels
                facts = sbommod.ImageFacts(
                    name=vp.name,
                    title=lab.get(f"{labels.OCI}title", vp.variant),
                    platform=pi.platform,
                    manifest_digest=pi.image_id,
                    labels=lab,
                    base_name=lab.get(f"{labels.OCI}base.name", ""),
                    base_digest=lab.get(f"{labels.OCI}base.digest", signing.NO_BASE_DIGEST),
                    site_packages=lab.get(f"{labels.PREFIX}site-packages", ""),
                )
                ref = f"{vp.name}@{pi.image_id}"
                signing.attest_sbom(ref, sbommod.render(sbommod.spdx(facts)), key)
                done.append(f"sbom {ref}")
                say(f"{vp.variant} {pi.platform}: SPDX SBOM attested on {pi.image_id[:19]}")
        if sign:
            ref = f"{vp.name}@{outcome.index}"
            signing.sign(ref, key)
            done.append(f"signature {ref}")
            say(f"{vp.variant}: index {outcome.index[:19]} signed")
    return done


@dataclass
class PublishResult:
    """What a publish did (or, `outcomes` None, would do): the plan, each variant's outcome, what was
    attached (SBOMs, signatures) and how long it took."""

    plan: list[VariantPublish]
    outcomes: list[Outcome] | None = None
    attached: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        if self.outcomes is None:
            return {"dry_run": True, "variants": [vp.to_json() for vp in self.plan]}
        return {
            "variants": [{**vp.to_json(), **o.to_json()} for vp, o in zip(self.plan, self.outcomes, strict=True)],
            "attached": self.attached,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class _Planned:
    """A platform of a dry run: the plan's digests, not yet an image."""

    variant: str
    platform: str
    immutable: str
    inputs_digest: str
    image_id: str = "(not built)"


def _options(project: Project, selection: Selection, repository: str | None, base: str | None) -> BuildOptions:
    from imgbuild.images.build import BuildOptions

    # Built under the configured repository: --repository changes where an image goes, not what it is.
    configured = all(project.variants[n].image.repository for n in selection.names)
    return BuildOptions(base=base, repository=None if configured else repository, smoke=True)


def _moving(project: Project, selection: Selection) -> dict[str, tuple[str, ...]]:
    return {n: tuple(project.variants[n].image.tags) for n in selection.names}


def dry_run(
    project: Project, selection: Selection, registry: str, *, repository: str | None = None, base: str | None = None
) -> PublishResult:
    """Where each image would go, from the build plan; builds and pushes nothing."""
    from imgbuild.images import build

    t0 = time.perf_counter()
    options = _options(project, selection, repository, base)
    planned = build.dry_run(project, selection, options)
    images = [_Planned(ib.variant, ib.platform, ib.immutable_ref, ib.inputs_digest) for ib in planned.plan.images]
    plan = plan_variants(images, registry, project.pin.version, _moving(project, selection), repository)
    return PublishResult(plan, seconds=time.perf_counter() - t0)


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
    say: Say = _stderr,
) -> PublishResult:
    """Build (and smoke-test) locally, push each variant, then attach SBOMs and signatures (with `key`)."""
    from imgbuild.images import build
    from imgbuild.images.docker import Engine

    t0 = time.perf_counter()
    engine = Engine.connect()
    options = _options(project, selection, repository, base)
    built = build.build(engine, project, selection, options, say)
    found = {img.immutable: engine.require(img.immutable).labels for img in built.images}
    plan = plan_variants(built.images, registry, project.pin.version, _moving(project, selection), repository, found)
    outcomes = [push_variant(vp, say) for vp in plan]
    attached = []
    if key is not None and (sbom or sign):
        attached = attach(plan, outcomes, key, sbom=sbom, sign=sign, say=say)
    return PublishResult(plan, outcomes, attached, time.perf_counter() - t0)
