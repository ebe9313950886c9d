"""`imgbuild patches status`: each pin and its cache mirror, the series, the variants, header problems, a
rebase in progress, an open `patches edit` work tree (with work not refreshed into patches/ yet) and patch
files changed since the last commit of the project."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from imgbuild.config.models import PinRelease
from imgbuild.errors import ImgbuildError
from imgbuild.project import Project
from imgbuild.shapes import added_later, named, of_one_form
from imgbuild.upstream.commits import status_porcelain
from imgbuild.upstream.git import run_git
from imgbuild.upstream.mirror import Mirror, PinCache
from imgbuild.workflows import queue
from imgbuild.workflows.rebase import control as rebase
from imgbuild.workflows.rebase.state import RebaseInfo, ShownResult, Stopped
from imgbuild.workflows.rebase.state import Status as RebaseStatus


@named("RebaseState")
@dataclass(frozen=True)
class RebaseShown:
    """A rebase that is stopped or was interrupted: the message other commands show, and (when the state is
    readable) the rebase as `patches rebase --json` shows it."""

    message: str
    status: Annotated[RebaseStatus | None, of_one_form()] = None
    old: Annotated[PinRelease | None, of_one_form()] = None
    onto: Annotated[PinRelease | None, of_one_form()] = None
    next: Annotated[int | None, of_one_form()] = None
    stopped: Annotated[Stopped | None, of_one_form()] = None
    results: Annotated[list[ShownResult] | None, of_one_form()] = None
    patches: Annotated[int | None, of_one_form()] = None
    work_tree: Annotated[str | None, of_one_form()] = None

    @classmethod
    def of(cls, message: str, info: RebaseInfo | None) -> RebaseShown:
        """The message alone when the state cannot be read, else with the state."""
        if info is None:
            return cls(message)
        i = info
        return cls(message, i.status, i.old, i.onto, i.next, i.stopped, i.results, i.patches, i.work_tree)

    @model_serializer(mode="wrap")
    def _printed(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """Only `message` when the state could not be read (no `status`). (No return type: pydantic would take
        it for the printed schema.)"""
        out = handler(self)
        return out if self.status is not None else {"message": out["message"]}


@named("EditState")
@dataclass(frozen=True)
class EditShown:
    # An open `patches edit` work tree: where, on which pin and release, whether it holds work that `patches
    # refresh` has not written to patches/ yet, and which patch files changed in patches/ since it was opened; or,
    # when its state cannot be read, why (`problem`). (No docstring: its schema has no description.)

    tree: str
    upstream: Annotated[str | None, of_one_form()] = None
    tag: Annotated[str | None, of_one_form()] = None
    unrefreshed: Annotated[bool, of_one_form("It holds work `patches refresh` has not written back.")] = False
    changed_since_opened: Annotated[
        list[str], of_one_form("Patch files changed in patches/ since the work tree was opened.")
    ] = field(default_factory=list)
    problem: Annotated[str | None, of_one_form()] = None

    @model_serializer(mode="wrap")
    def _printed(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """`tree` and `problem` when the state could not be read; else every key but `problem`."""
        out = handler(self)
        if self.problem is not None:
            return {"tree": out["tree"], "problem": out["problem"]}
        return {k: v for k, v in out.items() if k != "problem"}


@dataclass(frozen=True)
class Status:
    pins: tuple[PinCache, ...]  # the first pin first
    patches: int
    digest: str
    variants: tuple[str, ...]
    lint: tuple[str, ...]
    rebase: RebaseShown | None
    edit: EditShown | None = None  # an open `patches edit` work tree (edit_state)
    modified: tuple[str, ...] = ()  # patches/ files git sees changed since the project's last commit

    def shown(self) -> StatusShown:
        """What `patches status --json` prints: the first pin and its cache apart, then every pin."""
        first = self.pins[0]
        return StatusShown(
            PinShown(first.name, first.tag, first.commit, first.kind),
            list(self.pins),
            CacheShown(first.mirror, first.pinned_commit_cached),
            SeriesShown(self.patches, self.digest),
            list(self.variants),
            list(self.lint),
            self.rebase,
            self.edit,
            list(self.modified),
        )


@named("PinState")
@dataclass(frozen=True)
class PinShown:
    name: str
    tag: str
    commit: str
    kind: str


@named("Cache")
@dataclass(frozen=True)
class CacheShown:
    mirror: str
    pinned_commit_cached: bool


@named("SeriesState")
@dataclass(frozen=True)
class SeriesShown:
    patches: int
    digest: str


@dataclass(frozen=True)
class StatusShown:
    upstream: PinShown
    upstreams: Annotated[
        list[PinCache], Field(description="Every pin, the first (also `upstream`) first, each with its cache mirror.")
    ]
    cache: CacheShown
    series: SeriesShown
    variants: list[str]
    lint: list[str]
    rebase: RebaseShown | None
    edit: Annotated[
        EditShown | None, added_later("An open `patches edit` work tree (null: none).", null_default=True)
    ] = None
    modified: Annotated[
        list[str], added_later("patches/ files changed since the project's last commit (git status).")
    ] = field(default_factory=list)


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


def edit_state(root: Path) -> EditShown | None:
    """An open `patches edit` work tree: where, on which pin and release, whether it holds work that `patches
    refresh` has not written to patches/ yet, and which patch files changed in patches/ since it was opened."""
    work = queue.session(root)
    try:
        state = work.read()
    except ImgbuildError as exc:
        return EditShown(str(work.tree), problem=exc.message)
    if state is None:
        return None
    scratch = work.scratch()
    synced = state.get("synced") or (state["patches"][-1]["commit"] if state["patches"] else state["base"])
    unrefreshed = bool(status_porcelain(scratch)) or scratch.resolve_commit("HEAD") != synced
    started = state.get("inputs") or {}
    now = work.inputs(started)
    changed = sorted(path for path, digest in started.items() if now.get(path) != digest)
    return EditShown(str(work.tree), state.get("upstream"), state.get("tag"), unrefreshed, changed)


def modified_patches(root: Path) -> tuple[str, ...]:
    """patches/ files that differ from the project's last commit (`git status`; none outside a git checkout)."""
    done = run_git(["status", "--porcelain", "--untracked-files=all", "--", "patches"], cwd=root)
    if done.returncode != 0:
        return ()
    return tuple(line[3:] for line in done.stdout.decode(errors="replace").splitlines() if len(line) > 3)


def rebase_state(root: Path) -> RebaseShown | None:
    """A rebase that is stopped or was interrupted, as `patches status` shows it."""
    message = rebase.in_progress_message(root)
    if message is None:
        return None
    try:
        info = rebase.status(root)
    except ImgbuildError:  # a state the message above already calls unreadable
        info = None
    return RebaseShown.of(message, info)
