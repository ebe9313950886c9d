"""The documents of what the images will be and are: plan, build, smoke, skeleton, lock, bake, publish."""

from __future__ import annotations

from imgbuild.report.documents import Contract

# -- plan -----------------------------------------------------------------------------------------------------------
PLAN = Contract(
    "plan",
    "imgbuild.workflows.planning:ProjectPlan",
    "`imgbuild plan --json`: each variant's patches applied to the pinned release in memory, file by file, and the "
    "layers the variants share",
)


# -- build ----------------------------------------------------------------------------------------------------------
BUILD = Contract(
    "build", "imgbuild.builder.result:BuildResult", "`imgbuild build --json`: what was built, tagged and smoke-tested"
)


BUILD_PLAN = Contract(
    "build-plan", "imgbuild.plan.builds:PlannedBuilds", "`imgbuild build --dry-run --json`: the per-platform plan"
)


# -- smoke, skeleton ------------------------------------------------------------------------------------------------
SMOKE = Contract(
    "smoke",
    "imgbuild.smoke.report:SmokeRun",
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
LOCK = Contract("lock", "imgbuild.registry.lock:LockWritten", "`imgbuild lock --json`: images.lock as written")


LOCK_CHECK = Contract(
    "lock-check",
    "imgbuild.registry.lock:LockChecked",
    "`imgbuild lock --check --json` (exit 1 when stale: the same document, `ok` false)",
)


BAKE = Contract("bake", "imgbuild.plan.bake:Baked", "`imgbuild bake --json`")


BAKE_CHECK = Contract(
    "bake-check",
    "imgbuild.plan.bake:BakeChecked",
    "`imgbuild bake --check --json` (exit 1 when stale: the same document, `ok` false)",
)


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
