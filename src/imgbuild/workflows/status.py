"""`imgbuild patches status`: each pin and its cache mirror, the series, the variants, header problems, a
rebase in progress, an open `patches edit` work tree (with work not refreshed into patches/ yet) and patch
files changed since the last commit of the project."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imgbuild.errors import ImgbuildError
from imgbuild.project import Project
from imgbuild.shapes import dump
from imgbuild.upstream.commits import status_porcelain
from imgbuild.upstream.git import run_git
from imgbuild.upstream.mirror import Mirror, PinCache
from imgbuild.workflows import queue
from imgbuild.workflows.rebase import control as rebase


@dataclass(frozen=True)
class Status:
    pins: tuple[PinCache, ...]  # the first pin first
    patches: int
    digest: str
    variants: tuple[str, ...]
    lint: tuple[str, ...]
    rebase: dict[str, Any] | None  # `message` (what other commands say), then the state as `patches rebase` shows it
    edit: dict[str, Any] | None = None  # an open `patches edit` work tree (edit_state)
    modified: tuple[str, ...] = ()  # patches/ files git sees changed since the project's last commit


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
        edit_state(project.root),
        modified_patches(project.root),
    )


def edit_state(root: Path) -> dict[str, Any] | None:
    """An open `patches edit` work tree: where, on which pin and release, whether it holds work that `patches
    refresh` has not written to patches/ yet, and which patch files changed in patches/ since it was opened."""
    work = queue.session(root)
    try:
        state = work.read()
    except ImgbuildError as exc:
        return {"tree": str(work.tree), "problem": exc.message}
    if state is None:
        return None
    scratch = work.scratch()
    synced = state.get("synced") or (state["patches"][-1]["commit"] if state["patches"] else state["base"])
    unrefreshed = bool(status_porcelain(scratch)) or scratch.resolve_commit("HEAD") != synced
    started = state.get("inputs") or {}
    now = work.inputs(started)
    return {
        "tree": str(work.tree),
        "upstream": state.get("upstream"),
        "tag": state.get("tag"),
        "unrefreshed": unrefreshed,
        "changed_since_opened": sorted(path for path, digest in started.items() if now.get(path) != digest),
    }


def modified_patches(root: Path) -> tuple[str, ...]:
    """patches/ files that differ from the project's last commit (`git status`; none outside a git checkout)."""
    done = run_git(["status", "--porcelain", "--untracked-files=all", "--", "patches"], cwd=root)
    if done.returncode != 0:
        return ()
    return tuple(line[3:] for line in done.stdout.decode(errors="replace").splitlines() if len(line) > 3)


def rebase_state(root: Path) -> dict[str, Any] | None:
    """A rebase that is stopped or was interrupted, as `patches status` shows it."""
    message = rebase.in_progress_message(root)
    if message is None:
        return None
    try:
        info = rebase.status(root)
    except ImgbuildError:  # a state the message above already calls unreadable
        info = None
    return {"message": message, **(dump(info) if info else {})}
