"""Several platforms of a build plan as one multi-platform build per image (pure).

Docker 26 with the containerd image store builds `--platform a,b` in one
BuildKit call and keeps the index locally. `make_multi_plan` zips the
per-platform plan of `buildplan.make_build_plan`, platform by platform:

- layer N of every platform becomes one multi-platform layer image. Its
  Dockerfile names each platform's parent through a stage alias
  (`FROM skel-arm64 AS parent-arm64`, ..., `FROM parent-${TARGETARCH}`;
  BuildKit refuses `FROM skel:${TARGETARCH}`), then the one COPY. Layers above
  it start from the multi-platform layer below, so the variants share layers
  on every platform, as they do on one;
- a variant image has one stage per arch with that platform's ENV and labels
  (base digest and layer digests differ per platform), then
  `FROM image-${TARGETARCH}`.

An image's `imgbuild.inputs` is one digest over its platforms' inputs (the
same rule as a published index), so the immutable tag names the whole index.
`<immutable>-<arch>` names each platform's manifest: Docker 26 cannot
inspect one platform of an index, and smoke and inspect need to.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from imgbuild.errors import ConfigError
from imgbuild.images import dockerfile, labels
from imgbuild.images.layerimage import LayerPart
from imgbuild.images.plan import BuildPlan, ImageBuild, LayerBuild, ProjectInputs, Tagged, arch_of

LAYER_FORMAT = "imgbuild-multi-layer/1"
INDEX_FORMAT = "imgbuild-index/1"  # publish.py hashes a published index the same way


@dataclass(frozen=True)
class MultiLayer:
    digest: str
    tag: str
    platforms: tuple[str, ...]
    files: tuple[str, ...]
    variants: tuple[str, ...]
    dockerfile: str
    context: bytes = field(repr=False)
    parts: tuple[LayerBuild, ...] = field(repr=False)  # one per platform, as a single-platform build plans it
    parents: tuple[str, ...] = ()  # each part's parent here (the multi-platform layer below, or the base)

    def layer_parts(self) -> list[LayerPart]:
        """What writing this layer without BuildKit needs, one per platform."""
        return [p.part(parent, {labels.LAYER: self.digest}) for parent, p in zip(self.parents, self.parts, strict=True)]

    def to_json(self) -> dict[str, object]:
        return {
            "tag": self.tag,
            "digest": self.digest,
            "platforms": list(self.platforms),
            "files": list(self.files),
            "dockerfile": self.dockerfile,
        }


@dataclass(frozen=True)
class MultiImage(Tagged):
    variant: str
    platforms: tuple[str, ...]
    inputs_digest: str
    repository: str
    immutable_tag: str
    moving_tags: tuple[str, ...]
    dockerfile: str
    context: bytes = field(repr=False)
    parts: tuple[ImageBuild, ...] = field(repr=False)  # per platform: labels and a `-<arch>` immutable tag

    @property
    def platform_refs(self) -> dict[str, str]:
        return {p.platform: p.immutable_ref for p in self.parts}

    def to_json(self) -> dict[str, object]:
        return {
            "variant": self.variant,
            "platforms": list(self.platforms),
            "immutable": self.immutable_ref,
            "moving": list(self.moving_refs),
            "platform_refs": self.platform_refs,
            "inputs_digest": self.inputs_digest,
            "dockerfile": self.dockerfile,
        }


@dataclass(frozen=True)
class MultiPlan:
    layers: tuple[MultiLayer, ...]  # parents before children
    images: tuple[MultiImage, ...]
    source: BuildPlan = field(repr=False)

    def to_json(self) -> dict[str, object]:
        return {"layers": [ml.to_json() for ml in self.layers], "images": [mi.to_json() for mi in self.images]}


def _sha(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def index_inputs(parts: Mapping[str, str]) -> str:
    """platform -> inputs digest, as one digest for the index."""
    return _sha(INDEX_FORMAT, *(f"{p} {d}" for p, d in sorted(parts.items())))


def platforms_of(plan: BuildPlan) -> tuple[str, ...]:
    return tuple(sorted({ib.platform for ib in plan.images}))


def make_multi_plan(inputs: ProjectInputs, plan: BuildPlan) -> MultiPlan:
    platforms = platforms_of(plan)
    arches = [arch_of(p) for p in platforms]
    if len(set(arches)) != len(arches):
        raise ConfigError(
            f"platforms {', '.join(platforms)} share an architecture; one multi-platform build picks stages by arch",
            hint="build them one at a time with --platform",
        )
    # Layer N of a platform is keyed by its node index and the variants it serves.
    keyed: dict[tuple[int, tuple[str, ...]], dict[str, LayerBuild]] = {}
    for lb in plan.layers:
        keyed.setdefault((lb.index, lb.variants), {})[lb.platform] = lb
    multi: dict[str, MultiLayer] = {}  # per-platform layer digest -> its multi-platform layer
    layers: list[MultiLayer] = []
    for lb in plan.layers:
        key = (lb.index, lb.variants)
        if lb.digest in multi:
            continue
        parts = keyed[key]
        if sorted(parts) != list(platforms) or len({(p.files, p.copy) for p in parts.values()}) != 1:
            raise ConfigError(
                f"layer {lb.index} ({', '.join(lb.files)}) differs between platforms (files or site-packages), "
                "so the platforms cannot share one multi-platform build",
                hint="build one platform at a time with --platform, or give every platform the same site_packages",
            )
        ordered = tuple(parts[p] for p in platforms)
        parents = {arch_of(p.platform): _parent_ref(p, plan, multi) for p in ordered}
        digest = _sha(LAYER_FORMAT, *(f"{p.platform} {p.digest}" for p in ordered))
        repo = lb.tag.rsplit(":layer-", 1)[0]
        text = dockerfile.render_multi_layer(parents, inputs.package_root, lb.site_packages, {labels.LAYER: digest})
        ml = MultiLayer(
            digest=digest,
            tag=f"{repo}:layer-{digest[:12]}",
            platforms=platforms,
            files=lb.files,
            variants=lb.variants,
            dockerfile=text,
            context=dockerfile.context_tar(text, dockerfile.context_files(lb.context)),
            parts=ordered,
            parents=tuple(parents[arch_of(p.platform)] for p in ordered),
        )
        layers.append(ml)
        for p in ordered:
            multi[p.digest] = ml
    images = [_image(inputs, plan, variant, platforms, multi) for variant in _variants(plan)]
    return MultiPlan(tuple(layers), tuple(images), plan)


def _parent_ref(lb: LayerBuild, plan: BuildPlan, multi: Mapping[str, MultiLayer]) -> str:
    below = next((p for p in plan.layers if p.tag == lb.parent_ref and p.platform == lb.platform), None)
    return lb.parent_ref if below is None else multi[below.digest].tag


def _variants(plan: BuildPlan) -> list[str]:
    out: list[str] = []
    for ib in plan.images:
        if ib.variant not in out:
            out.append(ib.variant)
    return out


def _image(
    inputs: ProjectInputs,
    plan: BuildPlan,
    variant: str,
    platforms: Sequence[str],
    multi: Mapping[str, MultiLayer],
) -> MultiImage:
    per = {ib.platform: ib for ib in plan.images if ib.variant == variant}
    if sorted(per) != list(platforms):
        raise ConfigError(
            f"variant {variant} declares {', '.join(sorted(per))}, the others {', '.join(platforms)}; "
            "one multi-platform build needs the same platforms for every variant built together",
            hint="build the variants separately, or declare the same image.platforms",
        )
    combined = index_inputs({p: ib.inputs_digest for p, ib in per.items()})
    first = per[platforms[0]]
    version = inputs.upstream.version
    parts = []
    stages = {}
    for platform in platforms:
        ib = per[platform]
        arch = arch_of(platform)
        final = dict(sorted({**ib.labels, labels.INPUTS: combined}.items()))
        from_ref = multi[ib.layers[-1]].tag if ib.layers else ib.base.ref
        stages[arch] = dockerfile.render_variant(from_ref, ib.plan.variant.image.env, final, stage=f"image-{arch}")
        parts.append(
            dataclasses.replace(
                ib,
                from_ref=from_ref,
                labels=final,
                inputs_digest=combined,
                immutable_tag=f"{version}-{combined[:12]}-{arch}",
                moving_tags=(),
            )
        )
    text = dockerfile.render_multi_variant(stages)
    return MultiImage(
        variant=variant,
        platforms=tuple(platforms),
        inputs_digest=combined,
        repository=first.repository,
        immutable_tag=f"{version}-{combined[:12]}",
        moving_tags=tuple(first.plan.variant.image.tags),
        dockerfile=text,
        context=dockerfile.context_tar(text, {}),
        parts=tuple(parts),
    )
