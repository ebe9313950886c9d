"""`patches check` and `patches apply` on the pinned release: the series and its variants, as results."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from imgbuild.config.models import PinRelease, Upstream
from imgbuild.errors import ApplyError, ImgbuildError
from imgbuild.patches.apply import PatchOutcome, StackResult, apply_stack
from imgbuild.patches.variants import ResolvedVariant, apply_selection
from imgbuild.project import Project, merge3
from imgbuild.shapes import PathText, dump
from imgbuild.upstream.requires import Need, ShownNeed
from imgbuild.workflows.materialize import write_tree

CLEAN = ("exact", "offset")  # what `patches check` passes; fuzz and 3-way merges fail it


@dataclass(frozen=True)
class SeriesCheck:
    """The whole series applied to the pin (fuzz only when allowed, then 3-way), and each variant derived from it."""

    project: Project
    full: StackResult
    variants: dict[str, ResolvedVariant]  # those whose selection applies
    variant_errors: dict[str, str]  # variant -> why it has no plan
    lint: list[str]
    needs: list[Need] = field(default_factory=list)  # what each pinned release requires of another pin
    pin_problems: list[str] = field(default_factory=list)  # a requirement no pin meets (no override), stale overrides

    @property
    def applies(self) -> bool:
        """Every patch applies exact or at an offset, and every variant has a plan."""
        return self.full.ok and not self.variant_errors and all(o.method in CLEAN for o in self.full.outcomes)

    @property
    def ok(self) -> bool:
        return self.applies and not self.pin_problems

    def by_upstream(self) -> list[tuple[str, list[PatchOutcome]]]:
        """The series' outcomes per pin (pin name, its outcomes in series order), pins in their order."""
        of = {p.name: self.project.upstream_of(p).name for p in self.project.patches}
        return [(pin.name, [o for o in self.full.outcomes if of.get(o.patch) == pin.name]) for pin in self.project.pins]

    def checked(self) -> SeriesChecked:
        """The check as `patches check --json` prints it."""
        pin = self.project.pin
        files = {p.name: p.filename for p in self.project.patches}
        of = {p.name: self.project.upstream_of(p).name for p in self.project.patches}
        variants: dict[str, VariantApplies | VariantFails] = {
            **{n: VariantApplies(True, [files[x] for x in v.selected]) for n, v in self.variants.items()},
            **{n: VariantFails(False, e) for n, e in self.variant_errors.items()},
        }
        return SeriesChecked(
            pin.release(),
            [p.row() for p in self.project.pins],
            self.ok,
            [CheckedPatch.of(o, of.get(o.patch, pin.name)) for o in self.full.outcomes],
            variants,
            self.lint,
            [n.shown() for n in self.needs],
            self.pin_problems,
        )


@dataclass(frozen=True, kw_only=True)
class CheckedPatch(PatchOutcome):
    upstream: Annotated[
        str, Field(description="The pin the patch applies to (its DEP-3 `Upstream:`, default the first pin).")
    ]

    @classmethod
    def of(cls, outcome: PatchOutcome, upstream: str) -> CheckedPatch:
        kept = {f.name: getattr(outcome, f.name) for f in fields(PatchOutcome) if f.name != "shown"}
        return cls(**kept, upstream=upstream)


@dataclass(frozen=True)
class VariantApplies:
    ok: Literal[True]
    patches: list[str]


@dataclass(frozen=True)
class VariantFails:
    ok: Literal[False]
    error: str


@dataclass(frozen=True)
class SeriesChecked:
    """`patches check --json`: the series and its variants on the pins, and the pins' requirements."""

    upstream: PinRelease
    upstreams: Annotated[
        list[Upstream],
        Field(description="Every pin of patches/upstream.yaml, the first (top-level, also `upstream`) first."),
    ]
    ok: bool
    patches: list[CheckedPatch]
    variants: dict[str, VariantApplies | VariantFails]
    lint: list[str]
    requirements: list[ShownNeed]
    pin_problems: Annotated[
        list[str],
        Field(
            description="pins that disagree with another pin's requirement (no override), and overrides that "
            "replace nothing; any fails the check"
        ),
    ]


def check_series(project: Project, max_fuzz: int = 0) -> SeriesCheck:
    project.refuse_bad_headers()
    tree = project.tree()
    full = apply_stack(project.patches, tree, max_fuzz=max_fuzz, merge3=merge3)
    variants: dict[str, ResolvedVariant] = {}
    errors: dict[str, str] = {}
    for name, variant in project.variants.items():
        try:  # derived from `full`, not re-applied; what a plan adds (hashes of every file) cannot fail
            apply_selection(variant, project.patches, tree, max_fuzz=max_fuzz, full=full)
            variants[name] = variant
        except ImgbuildError as exc:  # a variant that cannot be planned is reported with the others
            errors[name] = exc.message
    return SeriesCheck(project, full, variants, errors, project.lint(), project.pin_needs, project.pin_problems)


class SeriesRefused(ApplyError):
    """`patches apply` found a patch that does not apply; nothing was written. Carries the per-patch report."""

    def __init__(self, message: str, hint: str, outcomes: list[PatchOutcome]) -> None:
        super().__init__(message, hint, {"ok": False, "patches": [dump(o) for o in outcomes]})
        self.outcomes = outcomes


@dataclass(frozen=True, kw_only=True)
class Applied:
    """The release with the stack applied, written into a new directory."""

    ok: Literal[True] = True
    into: PathText
    files: int
    outcomes: Annotated[list[PatchOutcome], Field(serialization_alias="patches")] = field(default_factory=list)


def apply_into(
    project: Project, into: Path, *, variant: str | None = None, max_fuzz: int = 0, only_changed: bool = False
) -> Applied:
    """The pinned release with the series (or a variant's selection) applied, written to a new directory."""
    if variant:
        plan = project.plan([variant], max_fuzz=max_fuzz)[0]
        changed: dict[str, bytes | None] = {f.path: plan.contents[f.path] for f in plan.files if f.state == "patched"}
        outcomes = list(plan.outcomes)
    else:
        result = apply_stack(project.patches, project.tree(), max_fuzz=max_fuzz, merge3=None)
        if not result.ok:
            bad = next(o for o in result.outcomes if not o.ok)
            why = "; ".join(f"{f.path}: {f.reason}" for f in bad.files if f.method == "conflict" and f.reason)
            raise SeriesRefused(
                f"{bad.patch} does not apply ({bad.method}{': ' + why if why else ''}); nothing was written to {into}",
                "run `imgbuild patches check` for the per-hunk report",
                result.outcomes,
            )
        changed, outcomes = result.changed, result.outcomes
    more = [(project.resolved(p.name).repo, project.resolved(p.name).commit) for p in project.pins[1:]]
    count = write_tree(
        into, project.upstream.repo, project.upstream.commit, changed, only_changed=only_changed, more=more
    )
    return Applied(into=into.resolve(), files=count, outcomes=outcomes)
