"""The documents of what the images will be and are: plan, build, smoke, skeleton, lock, bake, publish."""

from __future__ import annotations

from pydantic import Field

from imgbuild.config.models import Upstream  # the domain's own pin row, printed as it is
from imgbuild.report.documents import Contract, Document, Part
from imgbuild.report.documents.parts import Override, PatchApplied, Pin, Requirement


# -- plan -----------------------------------------------------------------------------------------------------------
class PinOverride(Override):
    pin: str


class PlannedFile(Part):
    path: str
    state: str = Field(description="patched or original")
    patches: list[str] = Field(description="the variant's patches that change the file")
    groups: list[str] = Field(description="the groups of every series patch touching the file")
    sha256: str | None
    blob: str | None
    pristine_blob: str | None
    pristine_sha256: str | None


class CarriedPackage(Part):
    package: str
    base_version: str | None = Field(description="the base's version by its *.dist-info; null: it has none")
    pinned: str
    pin: str
    why: str = Field(description="why the pin is at `pinned`: its override and reason, or the pin")
    companion_of: str | None = Field(description="the pin's own project, for a companion released with it")
    agrees: bool = Field(description="the base is at the pin (or has no dist-info for it); false: a build refuses it")


class PlanBase(Part):
    ref: str
    variants: list[str]
    platform: str | None
    image_id: str | None
    packages: list[CarriedPackage]
    unread: str | None = Field(description="why the base was not read (not in the local image store...); null: read")


class VariantPlan(Part):
    variant: str
    chain: list[str]
    patches: list[str]
    reverted: list[str]
    files: list[PlannedFile]
    apply: list[PatchApplied]


class Plan(Document):
    """`imgbuild plan --json`: each variant's patches applied to the pinned release in memory, file by file, and
    the layers the variants share"""

    name = "plan"
    upstream: Pin
    upstreams: list[Upstream] = Field(
        description="Every pin of patches/upstream.yaml, the first (also `upstream`) first."
    )
    requirements: list[Requirement]
    overrides: list[PinOverride]
    pin_problems: list[str] = Field(
        description="pins that disagree with another pin's requirement (no override), and overrides that replace "
        "nothing; any fails the check"
    )
    series_digest: str
    variants: list[VariantPlan]
    layers: list[str] = Field(description="the layers, one line each, then each variant's, then notes")
    bases: list[PlanBase] | None = Field(
        default=None, description="with --bases: each variant's image.base against the pinned packages"
    )


# -- build ----------------------------------------------------------------------------------------------------------
BUILD = Contract(
    "build", "imgbuild.builder.runner:BuildResult", "`imgbuild build --json`: what was built, tagged and smoke-tested"
)


BUILD_PLAN = Contract(
    "build-plan", "imgbuild.plan.builds:PlannedBuilds", "`imgbuild build --dry-run --json`: the per-platform plan"
)


# -- smoke, skeleton ------------------------------------------------------------------------------------------------
SMOKE = Contract(
    "smoke",
    "imgbuild.smoke.checks:SmokeRun",
    "`imgbuild smoke --json` (exit 8 when a check failed or, with --key, a signature or an SBOM is not verified: "
    "the same document, `ok` false)",
)


SKELETON = Contract(
    "skeleton", "imgbuild.builder.standin:SkeletonMade", "`imgbuild skeleton --json`: the stand-in base image"
)
SKELETON_RUNTIME = Contract(
    "skeleton-runtime",
    "imgbuild.builder.standin:RuntimeMade",
    "`imgbuild skeleton --runtime --json`: the runtime base image",
)


# -- lock, bake -----------------------------------------------------------------------------------------------------
class AlsoPinned(Part):
    name: str
    tag: str
    commit: str


class LockUpstream(Pin):
    also: list[AlsoPinned] | None = Field(default=None, description="the other pins, when there are several")


class LockedBase(Part):
    digest: str
    media_type: str
    platforms: dict[str, str]


class LockedVariant(Part):
    base: str
    platforms: list[str]


class LockFile(Part):
    version: int
    upstream: LockUpstream
    series: str
    bases: dict[str, LockedBase]
    variants: dict[str, LockedVariant]


class Lock(Document):
    """`imgbuild lock --json`: images.lock as written"""

    name = "lock"
    changed: bool
    lock: LockFile


class LockCheck(Document):
    """`imgbuild lock --check --json` (exit 1 when stale: the same document, `ok` false)"""

    name = "lock-check"
    ok: bool
    problems: list[str]


BAKE = Contract("bake", "imgbuild.plan.bake:Baked", "`imgbuild bake --json`")


class BakeCheck(Document):
    """`imgbuild bake --check --json` (exit 1 when stale: the same document, `ok` false)"""

    name = "bake-check"
    ok: bool
    problems: list[str]


# -- publish --------------------------------------------------------------------------------------------------------
PUBLISH = Contract(
    "publish",
    "imgbuild.publish.push:Published",
    "`imgbuild publish --json`: per variant the pushed image (`digest`: the index, or the one platform's manifest "
    "for a one-platform variant), `state`, what was pushed and moved",
)
PUBLISH_PLAN = Contract(
    "publish-plan", "imgbuild.publish.push:PublishPlanned", "`imgbuild publish --dry-run --json`: what would be pushed"
)
