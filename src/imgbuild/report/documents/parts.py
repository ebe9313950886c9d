"""Pieces several documents share: pins, applied patches, pin requirements, errors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from imgbuild.report.documents import Part


class Pin(Part):
    """A release: its tag and commit."""

    tag: str
    commit: str


class Hunk(Part):
    hunk: int
    header: str
    method: str
    offset: int
    line: int | None


class FileApplied(Part):
    path: str
    method: str
    reason: str | None
    hunks: list[Hunk]


class PatchApplied(Part):
    """One patch applied: `patch` is its file name as patches/series spells it (`.patch` included)."""

    patch: str
    group: str | None
    method: str
    files: list[FileApplied]


class Override(Part):
    """An override in patches/upstream.yaml: the requirement it replaces, the version used instead, and why."""

    requirement: str
    version: str
    reason: str


class Requirement(Part):
    """What one pinned release requires of another pin (its wheel's Requires-Dist): met (ok), replaced by an
    override in patches/upstream.yaml (overridden), or not (mismatch)."""

    by: str
    by_version: str
    requirement: str
    pin: str
    project: str
    pinned: str
    status: Literal["ok", "overridden", "mismatch"]
    override: Override | None
    message: str


class ErrorBody(Part):
    """What failed. More keys may follow: a refused apply's `patches`, a stopped rebase's `stopped`, an import's
    `outcome`, a failed smoke test's `smoke` (the image's report, as in imgbuild.smoke/1)."""

    model_config = ConfigDict(extra="allow")

    type: str
    message: str
    hint: str | None
    exit_code: int


Json = dict[str, Any]  # a record carried through as the workflow wrote it (not typed here)
