"""The documents of `imgbuild patches ...`: list, status, check, apply, rebase, edit, refresh, bump, import."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from imgbuild.report.documents import Contract, Document, Part
from imgbuild.report.documents.parts import (
    ErrorBody,
    Json,
    Override,
    Pin,
)
from imgbuild.upstream.mirror import PinCache  # the domain's own: status prints it as it is

# -- list, status ---------------------------------------------------------------------------------------------------
PATCHES_LIST = Contract(
    "patches-list", "imgbuild.project:SeriesListing", "`imgbuild patches list --json`: the series in order"
)


class PinState(Part):
    name: str
    tag: str
    commit: str
    kind: str


class Cache(Part):
    mirror: str
    pinned_commit_cached: bool


class SeriesState(Part):
    patches: int
    digest: str


class Unresolved(Part):
    path: str
    reason: str


class Stopped(Part):
    """Where a rebase stopped at a conflict: the work tree, the markers, what did apply."""

    filename: str
    work_tree: str
    patch: str = Field(description="the patch's text, saved beside the state")
    conflicts: dict[str, list[int]] = Field(description="path -> the lines of its conflict markers")
    unresolved: list[Unresolved]
    applied: list[str]
    reason: str
    moves: list[Json]
    files: list[Json] = Field(description="the carry's per-file, per-hunk outcomes")
    pending: list[Json] = Field(description="the carry preview: each patch after this one as it would carry now")


class PatchResult(Part):
    """One patch carried (or not) so far."""

    commit: str | None
    dormant: bool
    dropped_hunks: list[Json]
    filename: str
    files: list[Json]
    header: str | None
    moves: list[Json]
    outcome: str
    parent: str | None
    reason: str
    upstreamed_checks: list[Json]


class RebaseState(Part):
    """A rebase that is stopped or was interrupted: the message other commands show, and (when the state is
    readable) the rebase as `patches rebase --json` shows it."""

    message: str
    status: Literal["running", "stopped", "committing"] | None = None
    old: Pin | None = None
    onto: Pin | None = None
    next: int | None = None
    stopped: Stopped | None = None
    results: list[PatchResult] | None = None
    patches: int | None = None
    work_tree: str | None = None


class EditState(Part):
    tree: str
    upstream: str | None = None
    tag: str | None = None
    unrefreshed: bool = Field(default=False, description="It holds work `patches refresh` has not written back.")
    changed_since_opened: list[str] = Field(
        default_factory=list, description="Patch files changed in patches/ since the work tree was opened."
    )
    problem: str | None = None


class PatchesStatus(Document):
    """`imgbuild patches status --json`"""

    name = "patches-status"
    upstream: PinState
    upstreams: list[PinCache] = Field(
        description="Every pin, the first (also `upstream`) first, each with its cache mirror."
    )
    cache: Cache
    series: SeriesState
    variants: list[str]
    lint: list[str]
    rebase: RebaseState | None
    edit: EditState | None = Field(default=None, description="An open `patches edit` work tree (null: none).")
    modified: list[str] = Field(
        default_factory=list, description="patches/ files changed since the project's last commit (git status)."
    )


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
