"""The documents of `imgbuild patches ...`: list, status, check, apply, rebase, edit, refresh, bump, import."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from imgbuild.report.documents import Contract, Document, Part
from imgbuild.report.documents.parts import (
    ErrorBody,
    Override,
    Pin,
)

# -- list, status ---------------------------------------------------------------------------------------------------
PATCHES_LIST = Contract(
    "patches-list", "imgbuild.project:SeriesListing", "`imgbuild patches list --json`: the series in order"
)


PATCHES_STATUS = Contract("patches-status", "imgbuild.workflows.status:StatusShown", "`imgbuild patches status --json`")


# -- check, check --onto, apply --------------------------------------------------------------------------------------
PATCHES_CHECK = Contract(
    "patches-check",
    "imgbuild.workflows.checkstack:SeriesChecked",
    "`imgbuild patches check --json` (also what a failed check prints: exit 1, no error document). v2: `ok` is "
    "false too when a pin does not have what another pin's release requires and no override in "
    "patches/upstream.yaml says why, or an override replaces nothing (`pin_problems`); `requirements`: each pinned "
    "release's requirements on the other pins.",
)


PATCHES_CHECK_ONTO = Contract(
    "patches-check-onto",
    "imgbuild.workflows.matrix:MatrixChecked",
    "`imgbuild patches check --onto REF... --json`: variant x ref x patch",
)


PATCHES_APPLY = Contract(
    "patches-apply", "imgbuild.workflows.checkstack:Applied", "`imgbuild patches apply --into DIR --json`"
)


# -- rebase ---------------------------------------------------------------------------------------------------------
PATCHES_REBASE = Contract(
    "patches-rebase",
    "imgbuild.workflows.rebase.state:Rebased",
    "`imgbuild patches rebase --onto REF | --continue | --skip --json`: a rebase that finished (one that stops at a "
    "conflict prints the error document, `stopped` under `error`)",
)


PATCHES_REBASE_STATUS = Contract(
    "patches-rebase-status",
    "imgbuild.workflows.rebase.state:RebaseStatus",
    "`imgbuild patches rebase --json` with no option: the rebase in progress, if any",
)


PATCHES_REBASE_ABORT = Contract(
    "patches-rebase-abort", "imgbuild.workflows.rebase.state:Aborted", "`imgbuild patches rebase --abort --json`"
)


# -- edit, refresh --------------------------------------------------------------------------------------------------
PATCHES_EDIT = Contract("patches-edit", "imgbuild.workflows.queue:Opened", "`imgbuild patches edit --json`")


PATCHES_EDIT_DISCARD = Contract(
    "patches-edit-discard", "imgbuild.workflows.queue:Discarded", "`imgbuild patches edit --discard --json`"
)


PATCHES_REFRESH = Contract("patches-refresh", "imgbuild.workflows.queue:Refreshed", "`imgbuild patches refresh --json`")


# -- bump -----------------------------------------------------------------------------------------------------------
class BumpImage(Part):
    """An image the bump built and smoke-tested."""

    variant: str
    platform: str
    image_id: str
    immutable: str
    moving: list[str]
    index: str | None
    smoke: Literal["passed", "failed", "not run"]


class BumpPatch(Part):
    patch: str | None
    kind: str | None
    outcome: str | None


class Sides(Part):
    expected: list[str] = Field(description="what the patch expects to find (context and removed lines)")
    release: list[str] = Field(description="what the release has where the hunk should land")
    patch: list[str] = Field(description="what the patch wants there")


class Markers(Part):
    line: int
    ours: list[str]
    theirs: list[str]


class Context(Part):
    start: int
    lines: list[str]


class ConflictHunk(Part):
    """One hunk of the patch the rebase stopped at, where it should land on the release."""

    patch: str
    file: str
    original_file: str | None
    hunk: int
    header: str
    reason: str
    release_has_file: bool
    sides: Sides
    release_line: int | None
    lines_matching: int
    markers: Markers | None
    context: Context


class PlannedPinMove(Part):
    """At a stop: a pin that will move with the bump (what the new release requires of it)."""

    pin: str
    old: str
    new: str
    requirement: str
    required_by: str
    override: Override | None
    drop_override: bool
    message: str


class PinMoved(Part):
    """When carried: a pin that moved with the bump."""

    pin: str
    old: str
    new: str
    requirements: list[str]
    override: Override | None
    override_dropped: bool
    message: str
    patches: str | None = Field(default=None, description="the tally of its own carry, when it has patches")


class ConflictingHunks(Part):
    file: str
    hunks: list[int]
    headers: list[str]


class Pending(Part):
    """A patch not yet carried at a stop, carried in memory as `patches check --onto` does: will it apply, and
    which hunks conflict."""

    filename: str
    outcome: str
    kind: str
    summary: str
    reason: str
    dormant: bool
    conflicting_hunks: list[ConflictingHunks]


class BumpReport(Part):
    markdown: str
    json_: str = Field(alias="json")


class PatchesBump(Document):
    """`imgbuild patches bump --json`: the bump's outcome; on a conflict or a failed build `ok` is false and `error`
    is the error document's body"""

    name = "patches-bump"
    ok: bool
    status: Literal["current", "carried", "conflict", "build-failed"]
    message: str
    old: Pin = Field(description="the pin before the bump")
    onto: Pin = Field(description="the release the bump carries the series onto")
    branch: str | None
    commit: str | None
    built: bool
    images: list[BumpImage]
    patches: list[BumpPatch]
    conflicts: list[ConflictHunk] = Field(description="at a conflict: each hunk of the patch that stopped")
    pins: list[PinMoved | PlannedPinMove] = Field(
        description="the pins that moved with the bump (a pin the new release requires at another version)"
    )
    pending: list[Pending]
    report: BumpReport | None
    error: ErrorBody | None


# -- import ---------------------------------------------------------------------------------------------------------
PATCHES_IMPORT = Contract(
    "patches-import",
    "imgbuild.workflows.importer:Imported",
    "`imgbuild patches import SOURCE --json`: the patch written (or, with --dry-run, that would be) and the series "
    "checked with it",
)
