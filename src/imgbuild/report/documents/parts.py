"""Pieces the documents not yet printed from domain types share: pins, overrides, errors."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from imgbuild.report.documents import Part


class Pin(Part):
    """A release: its tag and commit."""

    tag: str
    commit: str


class Override(Part):
    """An override in patches/upstream.yaml: the requirement it replaces, the version used instead, and why."""

    requirement: str
    version: str
    reason: str


class ErrorBody(Part):
    """What failed. More keys may follow: a refused apply's `patches`, a stopped rebase's `stopped`, an import's
    `outcome`, a failed smoke test's `smoke` (the image's report, as in imgbuild.smoke/1)."""

    model_config = ConfigDict(extra="allow")

    type: str
    message: str
    hint: str | None
    exit_code: int


Json = dict[str, Any]  # a record carried through as the workflow wrote it (not typed here)
