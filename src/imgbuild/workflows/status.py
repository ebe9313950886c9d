"""`imgbuild patches status`: each pin and its cache mirror, the series, the variants, header problems, and a
rebase in progress."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imgbuild.errors import ImgbuildError
from imgbuild.project import Project
from imgbuild.upstream.mirror import Mirror
from imgbuild.workflows import rebase


@dataclass(frozen=True)
class PinCache:
    """A pin, with its cache mirror and whether the mirror has the pinned commit."""

    name: str
    tag: str
    commit: str
    kind: str
    package_root: str
    mirror: str
    pinned_commit_cached: bool


@dataclass(frozen=True)
class Status:
    pins: tuple[PinCache, ...]  # the first pin first
    patches: int
    digest: str
    variants: tuple[str, ...]
    lint: tuple[str, ...]
    rebase: dict[str, Any] | None  # `message` (what other commands say), then the state as `patches rebase` shows it


def status(project: Project) -> Status:
    """Where the project stands: it opens each pin's mirror (nothing is fetched)."""
    pins = []
    for pin in project.pins:
        mirror = Mirror(pin.source, pin.package_root)
        cached = mirror.path.exists() and bool(mirror.open().resolve_commit(pin.commit))
        pins.append(
            PinCache(pin.name, pin.tag, pin.commit, pin.source.kind, pin.package_root, str(mirror.path), cached)
        )
    return Status(
        tuple(pins),
        len(project.patches),
        project.series_digest,
        tuple(project.variants),
        tuple(project.lint()),
        rebase_state(project.root),
    )


def rebase_state(root: Path) -> dict[str, Any] | None:
    """A rebase that is stopped or was interrupted, as `patches status` shows it."""
    message = rebase.in_progress_message(root)
    if message is None:
        return None
    try:
        info = rebase.status(root)
    except ImgbuildError:  # a state the message above already calls unreadable
        info = None
    return {"message": message, **(info or {})}
