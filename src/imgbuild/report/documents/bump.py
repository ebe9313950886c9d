"""The document of `imgbuild patches bump`, apart from the other patches documents: its parts are the rebase's
domain types, which import the carry machinery (and gitpython), loaded only when a bump prints."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from imgbuild.report.documents import Document, Part
from imgbuild.report.documents.parts import ErrorBody, Override, Pin
from imgbuild.upstream.requires import PlannedMove  # the domain's own
from imgbuild.workflows.rebase.carry_preview import PendingShown  # the domain's own


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
    pins: list[PinMoved | PlannedMove] = Field(
        description="the pins that moved with the bump (a pin the new release requires at another version)"
    )
    pending: list[PendingShown]
    report: BumpReport | None
    error: ErrorBody | None
