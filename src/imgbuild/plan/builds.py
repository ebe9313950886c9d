"""From file plans and resolved bases to exact builds (pure). An image's inputs digest hashes its platform, base id
and Dockerfile; it is the `imgbuild.inputs` label and the tail of the immutable tag."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from imgbuild.patches.variants import VariantPlan
from imgbuild.plan import dockerfile, labels
from imgbuild.plan.bytecode import BytecodeMap
from imgbuild.plan.labels import ProjectInputs
from imgbuild.plan.layers import LayerKey, LayerNode, LayerPlan, describe, digest_lines, share_layers
from imgbuild.platforms import Platform

if TYPE_CHECKING:
    from imgbuild.project import Selection

IMAGE_FORMAT = "imgbuild-image/2"  # 2: the layers carry the bytecode of their modules (plan/bytecode.py)


@dataclass(frozen=True)
class BaseInfo:
    """A base image as resolved on the daemon (or as far as a dry run can)."""

    ref: str
    image_id: str  # sha256:..., or "unresolved" in a dry run without the image
    digest: str | None  # its manifest digest in a registry (a repo digest, or the lock's); None if unknown
    platform: Platform
    site_packages: str
    local: bool = False  # built here (a stand-in): no registry origin, so no base.name or base.digest label


BaseMap = Mapping[tuple[str, Platform], BaseInfo]  # (variant, platform) -> its resolved base


class Tagged:
    """The refs of a build with a repository, an immutable tag and moving tags (one image or several platforms)."""

    repository: str
    immutable_tag: str
    moving_tags: tuple[str, ...]

    @property
    def immutable_ref(self) -> str:
        return f"{self.repository}:{self.immutable_tag}"

    @property
    def moving_refs(self) -> tuple[str, ...]:
        return tuple(f"{self.repository}:{t}" for t in self.moving_tags)


@dataclass(frozen=True)
class ImageBuild(Tagged):
    variant: str
    platform: Platform
    base: BaseInfo
    layers: tuple[str, ...]  # layer names (LayerNode.name), bottom first
    dockerfile: str
    context: bytes = field(repr=False)
    labels: Mapping[str, str] = field(repr=False)
    inputs_digest: str
    repository: str
    immutable_tag: str
    moving_tags: tuple[str, ...]
    plan: VariantPlan = field(repr=False)

    def planned(self) -> ImagePlanned:
        """The image as `build --dry-run --json` shows it."""
        return ImagePlanned(
            self.variant,
            str(self.platform),
            self.base.ref,
            self.immutable_ref,
            list(self.moving_refs),
            self.inputs_digest,
            list(self.layers),
            self.dockerfile,
            [str(e) for e in dockerfile.listing(self.context)],
            dict(self.labels),
        )


@dataclass(frozen=True)
class JoinBuild(Tagged):
    """A variant made for several platforms: one multi-platform image over its platforms' images, which
    then carry no moving tags of their own. BuildKit writes the index; the images stay as they are."""

    variant: str
    parts: tuple[ImageBuild, ...]  # one per platform, in the variant's order
    dockerfile: str
    inputs_digest: str
    repository: str
    immutable_tag: str
    moving_tags: tuple[str, ...]

    @property
    def context(self) -> bytes:
        return dockerfile.context_tar(self.dockerfile, {})

    def planned(self) -> JoinPlanned:
        """The join as `build --dry-run --json` shows it."""
        return JoinPlanned(
            self.variant,
            [str(p.platform) for p in self.parts],
            self.immutable_ref,
            list(self.moving_refs),
            self.inputs_digest,
            [p.immutable_ref for p in self.parts],
            self.dockerfile,
        )


@dataclass(frozen=True)
class BuildPlan:
    images: tuple[ImageBuild, ...]
    layer_plans: tuple[tuple[str, LayerPlan], ...]  # group title -> layer plan
    joins: tuple[JoinBuild, ...] = ()

    def planned(self) -> PlannedBuilds:
        """What `build --dry-run --json` prints of the per-platform plan."""
        return PlannedBuilds(
            [ib.planned() for ib in self.images],
            [j.planned() for j in self.joins],
            {title: describe(lp) for title, lp in self.layer_plans},
        )


@dataclass(frozen=True)
class ImagePlanned:
    variant: str
    platform: str
    base: str
    immutable: str
    moving: list[str]
    inputs_digest: str
    layers: Annotated[
        list[str],
        Field(
            description="the image's layers, bottom first: each a digest of its files (the context's "
            "`layers/<name>/`, one COPY each)"
        ),
    ]
    dockerfile: str
    context: Annotated[
        list[str],
        Field(
            description="the build context: `layers/<name>/<path>` per file of the image's layers, then the Dockerfile"
        ),
    ]
    labels: dict[str, str]


@dataclass(frozen=True)
class JoinPlanned:
    """A multi-platform image: the index over its platforms' images."""

    variant: str
    platforms: list[str]
    immutable: str
    moving: list[str]
    inputs_digest: str
    images: list[str]
    dockerfile: str


@dataclass(frozen=True)
class PlannedBuilds:
    """The per-platform plan as `build --dry-run --json` prints it (`BuildPlan.planned`)."""

    images: list[ImagePlanned]
    joins: list[JoinPlanned]
    layer_plans: Annotated[
        dict[str, list[str]], Field(description="per group of variants built together: its layers, as lines")
    ]


def immutable_tag(inputs: ProjectInputs, digest: str) -> str:
    """The immutable tag of an image, a join or a bake target: the images' version (the first pin's) and the first 12
    hex of its inputs digest (`imgbuild.inputs`; a join's is `join_inputs`). The one place it is spelled:
    `deploy/history.py` and `deploy/identity.py` read it back."""
    return f"{inputs.upstream.version}-{digest[:12]}"


def title_of(repository: str, variant: str, tags: Sequence[str] | None) -> str:
    """`org.opencontainers.image.title`: the image as users name it, e.g. vllm-dsv41:latest."""
    return f"{repository}:{tags[0]}" if tags else f"{repository} ({variant})"


def make_build_plan(
    inputs: ProjectInputs,
    plans: Sequence[VariantPlan],
    bases: BaseMap,
    selection: Selection,
    *,
    repository: str | None = None,
    bytecode: BytecodeMap | None = None,
) -> BuildPlan:
    """The images of the selected variants on their platforms; each layer carries the `bytecode` of its modules for
    its base (None: none, in a plan that builds nothing: a dry run, the no-op check). Their layers are
    `share_layers` over all `plans` (so `build engram-mem` alone makes the COPY `build latest` reuses);
    `layer_plans` shows them per platform and base of the images in `bases`."""
    by_name = {p.variant.name: p for p in plans}
    shared = share_layers(plans)
    layer_plans: dict[tuple[Platform, LayerKey], tuple[str, LayerPlan]] = {}
    for (variant, platform), base in sorted(bases.items()):
        key = LayerKey.of(by_name[variant].variant)
        if (platform, key) not in layer_plans:
            title = f"{platform} on {base.ref}"
            if any(t == title for t, _ in layer_plans.values()):  # --base put variants of two keys on one base
                title += f" (images/ name {key})"
            layer_plans[(platform, key)] = (title, shared.plan_of(variant))

    images: list[ImageBuild] = []
    joins: list[JoinBuild] = []
    for name in selection.names:
        plan = by_name[name]
        platforms = selection.platforms_of(name)
        parts = tuple(
            _image(inputs, plan, pf, bases[(name, pf)], shared.chain(name), repository, len(platforms) == 1, bytecode)
            for pf in platforms
        )
        images += parts
        if len(parts) > 1:
            joins.append(_join(inputs, plan, parts))
    return BuildPlan(tuple(images), tuple(layer_plans.values()), tuple(joins))


def join_inputs(images: Mapping[str, str]) -> str:
    """A join's inputs digest (the tail of its immutable tag): its Dockerfile over its parts, arch -> immutable
    ref. The engine shows a join with one part's labels, so `recipe` and `history` recompute it from the parts."""
    return digest_lines([IMAGE_FORMAT, "join", dockerfile.render_join(images)])


def _join(inputs: ProjectInputs, plan: VariantPlan, parts: tuple[ImageBuild, ...]) -> JoinBuild:
    images = {p.platform.arch: p.immutable_ref for p in parts}
    text = dockerfile.render_join(images)
    digest = join_inputs(images)
    return JoinBuild(
        variant=plan.variant.name,
        parts=parts,
        dockerfile=text,
        inputs_digest=digest,
        repository=parts[0].repository,
        immutable_tag=immutable_tag(inputs, digest),
        moving_tags=tuple(plan.variant.image.tags),
    )


def _image(
    inputs: ProjectInputs,
    plan: VariantPlan,
    platform: Platform,
    base: BaseInfo,
    chain: tuple[LayerNode, ...],
    repository: str | None,
    moving: bool,
    bytecode: BytecodeMap | None = None,
) -> ImageBuild:
    """One platform's image; it carries the variant's moving tags when it is the variant's only platform."""
    v = plan.variant
    repo = v.repository(repository, takes_repository=True)
    names = tuple(node.name for node in chain)
    image_labels = labels.image_labels(
        plan,
        inputs,
        base_ref="" if base.local else base.ref,  # a base with no registry origin has neither OCI label
        base_digest=None if base.local else base.digest,
        local_base=base.ref if base.local else "",
        site_packages=base.site_packages,
        layers=names,
        title=title_of(repo, v.name, v.image.tags),
        source=inputs.source,
    )
    keep = v.image.entrypoint == "keep"
    site = base.site_packages
    pre = dockerfile.render_image(base.ref, site, names, v.image.env, image_labels, keep_entrypoint=keep)
    digest = digest_lines([IMAGE_FORMAT, str(platform), base.image_id, pre])
    final_labels = dict(sorted({**image_labels, labels.INPUTS: digest}.items()))
    text = dockerfile.render_image(base.ref, site, names, v.image.env, final_labels, keep_entrypoint=keep)
    # the layers' files are the plan's (the pre-Dockerfile names them by their digest: the inputs cover them)
    # and each module's .pyc, compiled by the base's python (a function of the base's id and the files: the same)
    pyc = (bytecode or {}).get((base.image_id, site))
    files = {
        node.name: {
            **{f.path: plan.contents[f.path] for f in node.files},
            **(pyc.for_files(f.path for f in node.files) if pyc else {}),
        }
        for node in chain
    }
    return ImageBuild(
        variant=v.name,
        platform=platform,
        base=base,
        layers=names,
        dockerfile=text,
        context=dockerfile.context_tar(text, dockerfile.layer_context(files)),
        labels=final_labels,
        inputs_digest=digest,
        repository=repo,
        immutable_tag=immutable_tag(inputs, digest),
        moving_tags=tuple(v.image.tags) if moving else (),
        plan=plan,
    )
