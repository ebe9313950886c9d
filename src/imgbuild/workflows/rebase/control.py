"""`imgbuild patches rebase`: carry the series onto another upstream release, like `git rebase`.

The replay (replay.py) runs in a scratch git repository, `.imgbuild-work/rebase/tree`, and saves
`state.json` after every patch, so an interrupted run resumes; a conflict stops with markers in the work
tree (--continue / --skip / --abort). patches/ changes only at the end, through one journal (finish.py).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from imgbuild.atomic import write_json
from imgbuild.config.models import PinRelease
from imgbuild.errors import ImgbuildError, StateError, UsageError
from imgbuild.patches.patchfile import parse_patch
from imgbuild.progress import Say, quiet
from imgbuild.project import Project
from imgbuild.upstream.git import GitError, GitRepo
from imgbuild.upstream.refs import resolve_ref
from imgbuild.workflows.rebase.finish import SKIPPED, commit
from imgbuild.workflows.rebase.replay import replay_old, run, take_resolution
from imgbuild.workflows.rebase.state import (
    Aborted,
    Item,
    PatchResult,
    Pin,
    RebaseDone,
    RebaseInfo,
    RebaseState,
    RebaseStatus,
    RebaseStopped,
    load,
    read,
    save,
    saved,
    session,
)
from imgbuild.workflows.workspace import state_dir
from imgbuild.workflows.writeback import Journal, check_unchanged, dormant_markers, today

__all__ = [
    "RebaseDone",
    "RebaseStatus",
    "RebaseStopped",
    "abort",
    "in_progress_message",
    "refuse_if_busy",
    "resume",
    "start",
    "status",
]
Action = Literal["continue", "skip"]


def start(
    root: Path,
    ref: str,
    *,
    more: Sequence[str] = (),
    date: str | None = None,
    report: Path | None = None,
    say: Say = quiet,
    done_before: Sequence[str] = (),
) -> RebaseDone:
    """Rebase onto `ref` (`REF`: the first pin; `NAME=REF`: the pin NAME), then onto each of `more`, one
    pin after the other (each its own report; a stop in one leaves the next pending for --continue)."""
    work = session(root)
    with work.locked():
        refuse_if_busy(root)
        project = Project.load(root)
        names = [project.target(r)[0] for r in (ref, *more)]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UsageError(
                f"--onto names the upstream {', '.join(twice)} more than once",
                hint="give one --onto per upstream: `--onto NAME=REF --onto OTHER=REF`",
            )
        if not done_before:  # a later pin of the same run starts on what the earlier one wrote
            refuse_dirty_patches(root)
        name, ref = project.target(ref)
        pin = project.pin_named(name)
        old = project.resolved(name)
        new = resolve_ref(pin, ref)
        items = _items(root, project, name)
        state = RebaseState(
            token=uuid.uuid4().hex,
            status="running",
            ref=ref,
            upstream=name if project.multi else "",
            pending=list(more),
            done_before=list(done_before),
            old=Pin(pin.tag, old.commit),
            onto=Pin(new.tag, new.commit),
            today=date or today(),
            report=str(report) if report else None,
            inputs=work.inputs(i.path for i in items),
            items=items,
            head=new.commit,
        )

        def fill(scratch: GitRepo, staging: Path) -> None:
            replay_old(project, scratch, old.commit, state)
            write_json(staging / "state.json", saved(state))

        work.create(old.repo.path / "objects", state.token, fill)
        what = f"{name} " if project.multi else ""
        say(f"rebasing {len(items)} {what}patches from {pin.tag} onto {new.tag} ({new.commit[:12]})")
        pending, before = list(state.pending), [*state.done_before, name]
        done = run(root, state, say)
    return _next(root, done, pending, before, date, say)


def _next(
    root: Path, done: RebaseDone, pending: list[str], before: list[str], date: str | None, say: Say
) -> RebaseDone:
    """After one pin's rebase is written, the next pending one (if any), with this one in its `earlier`."""
    if not pending:
        return done
    later = start(root, pending[0], more=pending[1:], date=date, say=say, done_before=before)
    return dataclasses.replace(later, earlier=[*done.earlier, done, *later.earlier])


def resume(root: Path, action: Action, *, say: Say = quiet) -> RebaseDone:
    """`--continue` or `--skip`."""
    with session(root).locked():
        state = load(root)
        pending, before = list(state.pending), [*state.done_before, state.upstream]
        if state.status == "committing":
            say("finishing the interrupted write of patches/")
            done = commit(root, state)
        else:
            done = _resume(root, state, action, say)
    return _next(root, done, pending, before, state.today, say)


def _resume(root: Path, state: RebaseState, action: Action, say: Say) -> RebaseDone:
    # A patch or the series edited while the rebase was stopped: say so now, not after the last conflict.
    check_unchanged(root, state.inputs, "the rebase")
    if action == "skip":
        if state.status != "stopped":
            raise StateError("nothing to skip: the rebase is not stopped at a conflict", hint="use --continue")
        item = state.current
        state.record(PatchResult.of(item, "skipped", "skipped by the user"))
        say(f"{item.filename}: skipped; it is kept in patches/{SKIPPED}/{item.filename}")
    elif state.status == "stopped":
        take_resolution(root, state, say)
    else:
        say(f"resuming the interrupted rebase at patch {state.next + 1} of {len(state.items)}")
    state.status = "running"
    state.stopped = None
    save(root, state)
    return run(root, state, say)


def abort(root: Path) -> Aborted:
    work = session(root)
    with work.locked():
        state = load(root)
        if state.status == "committing":
            journal = Journal.load(root, work.txn)
            if journal is not None:
                journal.rollback()
        work.remove()
        message = f"rebase onto {state.onto.tag} aborted; patches/ and the pin are as they were"
        if state.done_before:
            message += (
                f" before it (the rebase of {', '.join(state.done_before)} earlier in this run is written to "
                "patches/ and stays: `git diff patches/`)"
            )
        if state.pending:
            message += f"; not started: {', '.join(state.pending)}"
        return Aborted(True, message)


def status(root: Path) -> RebaseInfo | None:
    """`patches rebase` with no flag, and `patches status --json`'s "rebase"."""
    s = read(root)
    if s is None:
        return None
    return RebaseInfo(
        s.status,
        PinRelease(s.old.tag, s.old.commit),
        PinRelease(s.onto.tag, s.onto.commit),
        s.next,
        s.stopped,
        [r.shown() for r in s.results],
        len(s.items),
        str(session(root).tree),
    )


def busy_message(root: Path, state: RebaseState) -> str:
    tree = session(root).tree
    onto = state.onto.tag
    if state.status == "stopped":
        at = state.stopped.filename if state.stopped else None
        return f"a rebase onto {onto} is in progress, stopped at {at} (conflict); work tree: {tree}"
    if state.status == "committing":
        return f"a rebase onto {onto} was interrupted while writing patches/; work tree: {tree}"
    return f"a rebase onto {onto} was interrupted at patch {state.next + 1} of {len(state.items)}; work tree: {tree}"


def in_progress_message(root: Path) -> str | None:
    """One line saying a rebase is in progress or was interrupted, for other commands."""
    try:
        state = read(root)
    except StateError as exc:
        return exc.message
    return None if state is None else busy_message(root, state)


def refuse_if_busy(root: Path) -> None:
    """Refuse when a rebase or a `patches edit` work tree is open."""
    state = read(root)
    if state is not None:
        raise StateError(
            busy_message(root, state),
            hint="run `imgbuild patches rebase --continue` (or --skip), or `--abort` to drop it",
        )
    pq = state_dir(root, "pq")
    if pq.exists():
        raise StateError(
            f"a `patches edit` work tree is open at {pq / 'tree'}",
            hint="run `imgbuild patches refresh --close` or `imgbuild patches edit --discard` first",
        )


def refuse_dirty_patches(root: Path) -> None:
    """Refuse a patches/ with uncommitted changes (a rebase, or a bump before its branch, writes patches/)."""
    try:
        out = GitRepo(root).status("patches")
    except GitError:
        return  # not a git checkout: nothing to compare with
    if out.strip():
        raise StateError(
            f"patches/ has uncommitted changes:\n{out.rstrip()}",
            hint="commit or stash them first, so the rebase's result can be reviewed as one change",
        )


def _items(root: Path, project: Project, upstream: str) -> list[Item]:
    """The series' patches of the pin `upstream` (and its dormant ones in patches/upstreamed/), in order."""
    entries = project.series  # as Project.load parsed it
    mine = {p.filename for p in project.patches_of(upstream)}
    items = [Item(e.filename, e.line, False, f"patches/{e.filename}") for e in entries if e.filename in mine]
    listed = {e.filename for e in entries}
    for line, _, filename in dormant_markers((root / "patches" / "series").read_text(encoding="utf-8")):
        path = root / "patches" / "upstreamed" / filename
        if filename not in listed and path.is_file() and _dormant_upstream(project, path) == upstream:
            items.append(Item(filename, line, True, f"patches/upstreamed/{filename}"))
    return sorted(items, key=lambda i: i.line)


def _dormant_upstream(project: Project, path: Path) -> str:
    """The pin a patch kept in patches/upstreamed/ belongs to (its `Upstream:`; the first pin by default)."""
    try:
        return parse_patch(path, project.roots).upstream
    except ImgbuildError:
        return project.pin.name
