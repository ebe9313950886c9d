"""`imgbuild plan --json`: each variant's plan on the pins, the pins' requirements and overrides, the layers, and
with `--bases` what each base carries (`planned`: the document, from what the command planned)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from imgbuild.config.models import PinnedOverride, PinRelease, Upstream
from imgbuild.patches.variants import PlannedVariant, VariantPlan
from imgbuild.plan.packages import PlanBase
from imgbuild.project import Project
from imgbuild.shapes import null_unless_asked
from imgbuild.upstream.requires import ShownNeed

if TYPE_CHECKING:  # the engine (and the docker SDK) only for --bases: a plan is pure
    from imgbuild.builder.packages import BaseCarries


@dataclass(frozen=True)
class ProjectPlan:
    upstream: PinRelease
    upstreams: Annotated[
        list[Upstream], Field(description="Every pin of patches/upstream.yaml, the first (also `upstream`) first.")
    ]
    requirements: list[ShownNeed]
    overrides: list[PinnedOverride]
    pin_problems: Annotated[
        list[str],
        Field(
            description="pins that disagree with another pin's requirement (no override), and overrides that "
            "replace nothing; any fails the check"
        ),
    ]
    series_digest: str
    variants: list[PlannedVariant]
    layers: Annotated[list[str], Field(description="the layers, one line each, then each variant's, then notes")]
    bases: Annotated[
        list[PlanBase] | None,
        null_unless_asked("with --bases: each variant's image.base against the pinned packages"),
    ] = None


def planned(
    project: Project, plans: Sequence[VariantPlan], layers: list[str], bases: Sequence[BaseCarries] | None
) -> ProjectPlan:
    """The plan as `plan --json` prints it: `plans` the variants asked for, `layers` their layer lines, `bases`
    what `--bases` read (None without it)."""
    return ProjectPlan(
        project.pin.release(),
        [p.row() for p in project.pins],
        [n.shown() for n in project.pin_needs],
        [o for p in project.pins if (o := p.pinned_override()) is not None],
        project.pin_problems,
        project.series_digest,
        [p.shown() for p in plans],
        layers,
        None if bases is None else [b.shown() for b in bases],
    )
