"""`imgbuild patches rebase`: carry the series onto another upstream release.

The replay runs in a scratch git repository, `.imgbuild-work/rebase/tree`,
that borrows the cache mirror's objects. First the series is replayed on the
pinned release, one commit per patch: those commits hold every patch's
original blobs, so a 3-way merge never lacks its base, and they are the old
side of the report's range-diffs. Then each patch is carried onto the new
release (patches.carry.carry_patch) and committed there. `state.json` is written
after every patch, so an interrupted run resumes where it stopped.

A conflict stops the run with the 3-way merge's markers in the work tree;
`--continue` takes the work tree as the patch, `--skip` drops the patch, and
`--abort` deletes the state. patches/ is not touched until the end, when
every changed file (patches, series, pin) is written through one journal
(workflows.writeback.Journal); a crash there is finished by `--continue` or undone by
`--abort`. Patches found upstreamed move to patches/upstreamed/ and leave a
`# upstreamed in TAG: FILE` line in the series, so that a later release that
reverts the change brings them back.

This module starts, resumes and aborts; the steps are beside it: the replay
loop and its conflict stop (workflows/rebase_replay.py), the end
(workflows/rebase_finish.py), and the session they share (workflows/rebase_session.py).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from imgbuild.atomic import write_json
from imgbuild.errors import ApplyError, ImgbuildError, StateError, UsageError
from imgbuild.patches.carry import replay_series
from imgbuild.patches.patchfile import upstream_of
from imgbuild.patches.series import parse_series
from imgbuild.project import Project
from imgbuild.upstream.commits import commit_files
from imgbuild.upstream.git import CommitTree, GitError, GitRepo
from imgbuild.upstream.refs import resolve_ref
from imgbuild.workflows.rebase_finish import commit
from imgbuild.workflows.rebase_replay import message, run, take_resolution
from imgbuild.workflows.rebase_session import (
    SKIPPED,
    Log,
    RebaseDone,
    RebaseStopped,
    busy_message,
    load,
    parse,
    save,
    session,
)
from imgbuild.workflows.rebase_state import Item, PatchResult, Pin, RebaseState, RebaseStatus
from imgbuild.workflows.workspace import state_dir
from imgbuild.workflows.writeback import Journal, check_unchanged, dormant_markers, today

__all__ = ["RebaseDone", "RebaseStopped", "abort", "in_progress_message", "refuse_if_busy", "resume", "start", "status"]
Action = Literal["continue", "skip"]


def _quiet(_: str) -> None:
    pass


# -- entry points ------------------------------------------------------------------
def start(
    root: Path,
    ref: str,
    *,
    more: Sequence[str] = (),
    date: str | None = None,
    report: Path | None = None,
    log: Log = _quiet,
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
            _refuse_dirty_patches(root)
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
            _replay_old(project, scratch, old.commit, state)
            write_json(staging / "state.json", state.to_json())

        work.create(old.repo.path / "objects", state.token, fill)
        what = f"{name} " if project.multi else ""
        log(f"rebasing {len(items)} {what}patches from {pin.tag} onto {new.tag} ({new.commit[:12]})")
        pending, before = list(state.pending), [*state.done_before, name]
        done = run(root, state, log)
    return _next(root, done, pending, before, date, log)


def _next(
    root: Path, done: RebaseDone, pending: list[str], before: list[str], date: str | None, log: Log
) -> RebaseDone:
    """After one pin's rebase is written, the next pending one (if any), with this one in its `earlier`."""
    if not pending:
        return done
    later = start(root, pending[0], more=pending[1:], date=date, log=log, done_before=before)
    return dataclasses.replace(later, earlier=[*done.earlier, done, *later.earlier])


def resume(root: Path, action: Action, *, log: Log = _quiet) -> RebaseDone:
    """`--continue` or `--skip`."""
    with session(root).locked():
        state = load(root)
        pending, before = list(state.pending), [*state.done_before, state.upstream]
        if state.status == "committing":
            log("finishing the interrupted write of patches/")
            done = commit(root, state)
        else:
            done = _resume(root, state, action, log)
    return _next(root, done, pending, before, state.today, log)


def _resume(root: Path, state: RebaseState, action: Action, log: Log) -> RebaseDone:
    # A patch or the series edited while the rebase was stopped: say so now, not after the last conflict.
    check_unchanged(root, state.inputs, "the rebase")
    if action == "skip":
        if state.status != "stopped":
            raise StateError("nothing to skip: the rebase is not stopped at a conflict", hint="use --continue")
        item = state.current
        state.record(PatchResult.of(item, "skipped", "skipped by the user"))
        log(f"{item.filename}: skipped; it is kept in patches/{SKIPPED}/{item.filename}")
    elif state.status == "stopped":
        take_resolution(root, state, log)
    else:
        log(f"resuming the interrupted rebase at patch {state.next + 1} of {len(state.items)}")
    state.status = "running"
    state.stopped = None
    save(root, state)
    return run(root, state, log)


def abort(root: Path) -> str:
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
        return message


def status(root: Path) -> RebaseStatus | None:
    work = session(root)
    data = work.read()
    if data is None:
        return None
    return RebaseStatus(parse(work, data), str(work.tree))


def in_progress_message(root: Path) -> str | None:
    """One line saying a rebase is in progress or was interrupted, for other commands."""
    work = session(root)
    try:
        data = work.read()
        if data is None:
            return None
        return busy_message(root, parse(work, data))
    except StateError as exc:
        return exc.message


def refuse_if_busy(root: Path) -> None:
    """Refuse when a rebase or a `patches edit` work tree is open."""
    work = session(root)
    data = work.read()
    if data is not None:
        raise StateError(
            busy_message(root, parse(work, data)),
            hint="run `imgbuild patches rebase --continue` (or --skip), or `--abort` to drop it",
        )
    pq = state_dir(root, "pq")
    if pq.exists():
        raise StateError(
            f"a `patches edit` work tree is open at {pq / 'tree'}",
            hint="run `imgbuild patches refresh --close` or `imgbuild patches edit --discard` first",
        )


def _refuse_dirty_patches(root: Path) -> None:
    try:
        repo = GitRepo(root)
        out = repo.status("patches")
    except GitError:
        return  # not a git checkout: nothing to compare with
    if out.strip():
        raise StateError(
            f"patches/ has uncommitted changes:\n{out.rstrip()}",
            hint="commit or stash them first, so the rebase's result can be reviewed as one change",
        )


def _items(root: Path, project: Project, upstream: str) -> list[Item]:
    """The series' patches of the pin `upstream` (and its dormant ones in patches/upstreamed/), in order."""
    series_path = root / "patches" / "series"
    mine = {p.filename for p in project.patches_of(upstream)}
    entries: list[tuple[int, str, bool, str | None]] = [
        (e.line, e.filename, False, None) for e in parse_series(series_path) if e.filename in mine
    ]
    text = series_path.read_text(encoding="utf-8")
    listed = {e.filename for e in parse_series(series_path)}
    for line, tag, filename in dormant_markers(text):
        path = root / "patches" / "upstreamed" / filename
        if filename not in listed and path.is_file() and _dormant_upstream(project, path) == upstream:
            entries.append((line, filename, True, tag))
    return [
        Item(
            filename=name,
            line=number,
            dormant=dormant,
            dormant_tag=marker,
            path=f"patches/upstreamed/{name}" if dormant else f"patches/{name}",
        )
        for number, name, dormant, marker in sorted(entries, key=lambda e: e[0])
    ]


def _dormant_upstream(project: Project, path: Path) -> str:
    """The pin a patch kept in patches/upstreamed/ belongs to (its `Upstream:`; the first pin by default)."""
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    header = text[: text.find("diff --git ")] if "diff --git " in text else text
    try:
        return upstream_of(path.name, header, project.roots)[0]
    except ImgbuildError:
        return project.pin.name


def _replay_old(project: Project, scratch: GitRepo, base: str, state: RebaseState) -> None:
    """Commit the moving pin's patches on its pinned release; record each patch's original blobs."""
    mine = project.patches_of(state.upstream or project.pin.name)
    steps = {s.patch.filename: s for s in replay_series(mine, CommitTree(scratch, base))}
    head = base
    for index, item in enumerate(state.items):
        step = steps.get(item.filename)
        if step is None:
            continue
        if not step.outcome.ok or step.outcome.method in ("fuzz",):
            bad = "; ".join(f"{f.path}: {f.reason or f.method}" for f in step.outcome.files if f.method == "conflict")
            raise ApplyError(
                f"{item.filename} does not apply to the pinned release {state.old.tag} ({bad or step.outcome.method})",
                hint="the series must apply where it is before it can move: run `imgbuild patches check`",
            )
        commit = commit_files(scratch, head, step.own, message(item.filename))
        blobs = {old: scratch.write_blob(data) for old, data in step.pre.items()}
        state.set_item(index, old_parent=head, old_commit=commit, blobs=blobs)
        head = commit
