"""`imgbuild patches rebase`: carry the series onto another upstream release, like `git rebase`.

The replay runs in a scratch git repository, `.imgbuild-work/rebase/tree`, borrowing the cache mirror's
objects. The series is first committed on the pinned release (each patch's original blobs, for 3-way
merges and range-diffs), then each patch is carried onto the new release (patches.carry.carry_patch)
and committed; `state.json` is saved after every patch, so an interrupted run resumes. A conflict stops
with markers in the work tree (--continue / --skip / --abort). patches/ changes only at the end, through
one journal (writeback.Journal). Upstreamed patches move to patches/upstreamed/ and leave a
`# upstreamed in TAG: FILE` series line, so a release that reverts the change brings them back.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from imgbuild.atomic import write_json
from imgbuild.config.models import UpstreamPin, load_pins, load_variant
from imgbuild.errors import ApplyError, ImgbuildError, StateError, UsageError
from imgbuild.patches import backport
from imgbuild.patches.apply import apply_stack
from imgbuild.patches.carry import Carry, carry_patch, conflict_marker_lines, replay_series
from imgbuild.patches.hunks import decode
from imgbuild.patches.patchfile import Patch, parse_patch, upstream_of
from imgbuild.patches.renames import RenameFinder
from imgbuild.patches.series import parse_series
from imgbuild.patches.variants import resolve_variants
from imgbuild.project import Project
from imgbuild.upstream.commits import (
    checkout_branch,
    commit_files,
    commit_raw,
    head_commit,
    is_ancestor,
    range_diff,
    tree_id,
)
from imgbuild.upstream.git import CommitTree, GitError, GitRepo
from imgbuild.upstream.refs import resolve_ref, wheel_pin_fields
from imgbuild.workflows import backport_check
from imgbuild.workflows.rebase_state import (
    Final,
    Item,
    PatchResult,
    Pin,
    RebaseState,
    Record,
    Row,
    Stopped,
    Unresolved,
)
from imgbuild.workflows.review import render_report, report_paths
from imgbuild.workflows.workspace import Session, state_dir
from imgbuild.workflows.writeback import (
    Journal,
    check_unchanged,
    dormant_line,
    dormant_markers,
    export_patch,
    parse_text,
    rewrite_pin_named,
    rewrite_series_lines,
    today,
)

__all__ = ["RebaseDone", "RebaseStopped", "abort", "in_progress_message", "refuse_if_busy", "resume", "start", "status"]
KIND = "rebase"
SKIPPED = "skipped"  # patches/skipped/: patches dropped with --skip, kept for later
BRANCH = "imgbuild-rebase"
Log = Callable[[str], None]
Action = Literal["continue", "skip"]


def session(root: Path) -> Session:
    return Session(root, KIND)


class RebaseStopped(ApplyError):
    """The rebase stopped at a conflict; the work tree holds it."""

    def __init__(self, message: str, hint: str, stopped: Stopped) -> None:
        super().__init__(message, hint, {"stopped": stopped.to_json()})
        self.stopped = stopped


@dataclass(frozen=True)
class RebaseDone:
    old: Pin
    onto: Pin
    results: list[Row]
    written: list[str] = field(default_factory=list)
    report: Path | None = None
    warnings: list[str] = field(default_factory=list)
    upstream: str = ""  # the pin that moved ("" : the first)
    earlier: list[RebaseDone] = field(default_factory=list)  # the pins rebased before it in one run

    def to_json(self) -> dict[str, object]:
        return {
            "ok": True,
            "old": self.old.to_json(),
            "onto": self.onto.to_json(),
            "patches": [r.to_json() for r in self.results],
            "written": self.written,
            "report": str(self.report) if self.report else None,
            "warnings": self.warnings,
            "upstream": self.upstream,
            "earlier": [d.to_json() for d in self.earlier],
        }


def busy_message(root: Path, state: RebaseState) -> str:
    tree = session(root).tree
    onto = state.onto.tag
    if state.status == "stopped":
        at = state.stopped.filename if state.stopped else None
        return f"a rebase onto {onto} is in progress, stopped at {at} (conflict); work tree: {tree}"
    if state.status == "committing":
        return f"a rebase onto {onto} was interrupted while writing patches/; work tree: {tree}"
    return f"a rebase onto {onto} was interrupted at patch {state.next + 1} of {len(state.items)}; work tree: {tree}"


def read(root: Path) -> RebaseState | None:
    """The open rebase's state, None when there is none."""
    work = session(root)
    data = work.read()
    if data is None:
        return None
    try:
        return RebaseState.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(
            f"{work.directory / 'state.json'} is not a rebase state this imgbuild can read ({exc})",
            hint="`imgbuild patches rebase --abort` drops it (patches/ and the pin stay as they are)",
        ) from exc


def load(root: Path) -> RebaseState:
    state = read(root)
    if state is None:
        raise StateError("no rebase is in progress", hint="start one with `imgbuild patches rebase --onto REF`")
    return state


def save(root: Path, state: RebaseState) -> None:
    session(root).save(state.to_json())


def moving_pin(root: Path, state: RebaseState) -> UpstreamPin:
    """The pin the rebase moves: the one its state names, else the first."""
    pins = load_pins(root / "patches" / "upstream.yaml")
    return next((p for p in pins if p.name == state.upstream), pins[0])


# -- start, resume, abort ----------------------------------------------------------------------
def quiet(_: str) -> None:
    pass


def start(
    root: Path,
    ref: str,
    *,
    more: Sequence[str] = (),
    date: str | None = None,
    report: Path | None = None,
    log: Log = quiet,
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


def resume(root: Path, action: Action, *, log: Log = quiet) -> RebaseDone:
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


def status(root: Path) -> dict[str, Any] | None:
    """`patches rebase` with no flag, and `patches status --json`'s "rebase"."""
    s = read(root)
    if s is None:
        return None
    return {
        "status": s.status,
        "old": s.old.to_json(),
        "onto": s.onto.to_json(),
        "next": s.next,
        "stopped": s.stopped.to_json() if s.stopped else None,
        "results": [r.to_json() for r in s.results],
        "patches": len(s.items),
        "work_tree": str(session(root).tree),
    }


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
    entries = parse_series(series_path)
    mine = {p.filename for p in project.patches_of(upstream)}
    items = [Item(e.filename, e.line, False, None, f"patches/{e.filename}") for e in entries if e.filename in mine]
    listed = {e.filename for e in entries}
    for line, tag, filename in dormant_markers(series_path.read_text(encoding="utf-8")):
        path = root / "patches" / "upstreamed" / filename
        if filename not in listed and path.is_file() and _dormant_upstream(project, path) == upstream:
            items.append(Item(filename, line, True, tag, f"patches/upstreamed/{filename}"))
    return sorted(items, key=lambda i: i.line)


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
        if not step.outcome.ok or step.outcome.method == "fuzz":
            bad = "; ".join(f"{f.path}: {f.reason or f.method}" for f in step.outcome.files if f.method == "conflict")
            raise ApplyError(
                f"{item.filename} does not apply to the pinned release {state.old.tag} ({bad or step.outcome.method})",
                hint="the series must apply where it is before it can move: run `imgbuild patches check`",
            )
        commit = commit_files(scratch, head, step.own, message(item.filename))
        blobs = {old: scratch.write_blob(data) for old, data in step.pre.items()}
        state.set_item(index, old_parent=head, old_commit=commit, blobs=blobs)
        head = commit


# -- the replay loop ----------------------------------------------------------------------
def _result(item: Item, carry: Carry) -> PatchResult:
    files = cast("list[Record]", carry.to_json()["files"])  # the per-hunk report, as `patches check` has it
    return PatchResult.of(
        item,
        carry.outcome,
        carry.reason,
        moves=tuple(m.to_json() for m in carry.moves),
        dropped_hunks=tuple(d.to_json() for d in carry.dropped),
        upstreamed_checks=tuple(c.to_json() for c in carry.checks),
        files=tuple(files),
    )


def message(filename: str) -> str:
    """The same message on both sides, so range-diffs show only the patch's change."""
    return f"{filename}\n"


def run(root: Path, state: RebaseState, log: Log) -> RebaseDone:
    scratch = session(root).scratch()
    package_root = moving_pin(root, state).package_root
    old_commit, onto = state.old.commit, state.onto
    finder = RenameFinder(scratch, lambda: old_commit, onto.commit)
    while state.next < len(state.items):
        item = state.current
        path = root / item.path
        raw = path.read_bytes()
        patch = parse_patch(path, package_root)
        blobs = {old: scratch.read_blob(sha) for old, sha in item.blobs.items()}
        head = state.head
        carry = carry_patch(
            patch,
            CommitTree(scratch, head),
            {},
            finder=finder,
            raw=decode(raw),
            blobs=blobs,
            label=f"upstream {onto.tag}",
        )
        carry = backport_check.recognise(carry, decode(raw), scratch, old_commit, onto.commit, onto.tag)
        result = _result(item, carry)
        new_head = None
        if carry.carried and carry.changes:
            new_head = commit_files(scratch, head, carry.changes, message(item.filename))
            result = replace(result, commit=new_head, parent=head)
        elif carry.outcome == "conflict" and not item.dormant:
            raise _stop(root, state, item, carry, raw)
        elif carry.carried:
            result = replace(result, outcome="upstreamed", reason="applies, but changes nothing")
        log(_progress(item, result))
        state.record(result, new_head)
        save(root, state)
    return finish(root, state, log)


def _progress(item: Item, result: PatchResult) -> str:
    shown: str = result.outcome
    if item.dormant:
        shown = {"upstreamed": "still upstreamed"}.get(
            shown, "reinstated" if result.commit else f"left out ({result.outcome})"
        )
    moves = "".join(f"; {m['old']} -> {m['new']}" for m in result.moves)
    dropped = f"; {len(result.dropped_hunks)} hunk(s) already upstream" if result.dropped_hunks else ""
    return f"{item.filename}: {shown}{moves}{dropped}"


def _stop(root: Path, state: RebaseState, item: Item, carry: Carry, raw: bytes) -> RebaseStopped:
    work = session(root)
    tree = work.tree
    scratch = work.scratch()
    checkout_branch(scratch, BRANCH, state.head)
    for path, data in {**carry.changes, **carry.conflicts}.items():  # what applied (staged), then the markers
        target = tree / path
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    clean = sorted(carry.changes)
    if clean:
        scratch.stage(*clean)
    markers = {path: tuple(conflict_marker_lines(data)) for path, data in sorted(carry.conflicts.items())}
    current = work.directory / "current.patch"
    current.write_bytes(raw)
    unresolved = tuple(
        Unresolved(f.path, f.reason) for f in carry.files if f.method == "conflict" and f.path not in carry.conflicts
    )
    stopped = Stopped(
        filename=item.filename,
        work_tree=str(tree),
        patch=str(current),
        conflicts=markers,
        unresolved=unresolved,
        applied=tuple(clean),
        reason=carry.reason,
        moves=tuple(m.to_json() for m in carry.moves),
        files=tuple(cast("list[Record]", carry.to_json()["files"])),
    )
    state.status = "stopped"
    state.stopped = stopped
    save(root, state)
    lines = [f"rebase stopped at {item.filename}: it does not apply to {state.onto.tag}"]
    lines.append(f"  work tree:   {tree}")
    for path, at in markers.items():
        lines.append(f"  conflict:    {path} (markers at line {', '.join(map(str, at))})")
    for u in unresolved:
        lines.append(f"  not applied: {u.path}: {u.reason}")
    if clean:
        lines.append(f"  applied:     {', '.join(clean)} (staged)")
    lines.append(f"  the patch:   {current}")
    hint = (
        "edit the files in the work tree until they hold the patch as it should be on the new release "
        "(no conflict markers left), then run `imgbuild patches rebase --continue`; "
        "`--skip` drops this patch from the series; `--abort` puts patches/ and the pin back exactly as they were"
    )
    return RebaseStopped("\n".join(lines), hint, stopped)


def take_resolution(root: Path, state: RebaseState, log: Log) -> None:
    """Commit the work tree as the stopped patch, squashing any commits the user made."""
    work = session(root)
    tree = work.tree
    scratch = work.scratch()
    head = state.head
    item = state.current
    current = head_commit(scratch)
    if current is None or not is_ancestor(scratch, head, current):
        raise StateError(
            f"the work tree {tree} is no longer on the rebase (HEAD {current} does not descend from {head[:12]})",
            hint="check out the rebase branch again, or `imgbuild patches rebase --abort`",
        )
    untracked = scratch.untracked()
    if untracked:
        raise StateError(
            f"new file(s) in the work tree that are not added to git: {', '.join(untracked[:10])}; "
            f"--continue would leave them out of {item.filename}",
            hint=f"`git -C {tree} add FILE` to put a file in the patch, or delete it; then run --continue again",
        )
    scratch.stage_tracked()
    changed = scratch.staged_paths(head)
    left = []
    for path in changed:
        file = tree / path
        if file.is_file():
            left += [f"{path}:{n}" for n in conflict_marker_lines(file.read_bytes())]
    if left:
        raise StateError(
            f"conflict markers are still in the work tree: {', '.join(left[:10])}",
            hint=f"resolve them in {tree}, then run --continue again",
        )
    new_tree = scratch.write_tree()
    if new_tree == tree_id(scratch, head):
        raise StateError(
            f"the work tree {tree} holds no change for {item.filename}",
            hint="make the change (and `git add` new files), or drop the patch with `imgbuild patches rebase --skip`",
        )
    commit = commit_raw(scratch, new_tree, [head], message(item.filename))
    stopped = state.stopped
    result = PatchResult.of(
        item,
        "resolved",
        "conflict resolved by hand: " + (stopped.reason if stopped else ""),
        moves=stopped.moves if stopped else (),
        commit=commit,
        parent=head,
    )
    state.record(result, commit)
    log(f"{item.filename}: resolved by hand")


# -- the end: patches/ written through one journal, the report ------------------------------
def finish(root: Path, state: RebaseState, log: Log) -> RebaseDone:
    work = session(root)
    check_unchanged(root, state.inputs, "the rebase")
    scratch = work.scratch()
    pin_path = root / "patches" / "upstream.yaml"
    pin = moving_pin(root, state)
    onto, date = state.onto, state.today
    journal = Journal(root, work.txn)
    series_text = (root / "patches" / "series").read_text(encoding="utf-8")
    line_ops: dict[int, str | None] = {}
    new_stack: list[Patch] = []
    rows = []
    for item, res in zip(state.items, state.results, strict=True):
        filename, dormant = item.filename, item.dormant
        orig_bytes = (root / item.path).read_bytes()
        orig = parse_patch(root / item.path, pin.package_root)
        final: Final = res.outcome
        file, range_text = "unchanged", ""
        if res.commit and res.parent:
            data = export_patch(
                scratch, res.parent, res.commit, orig_bytes, orig, orig.header, package_root=pin.package_root, date=date
            )
            if dormant:
                data = backport.applied_upstream_bytes(data or orig_bytes, orig.fields, "")
                journal.delete(item.path)
                line_ops[item.line] = filename
                final = "reinstated"
            if data is not None:
                journal.write(f"patches/{filename}", data)
                file = "reinstated" if dormant else "re-exported"
            new_stack.append(parse_text(filename, decode(data or orig_bytes), pin.package_root))
            if item.old_commit and data is not None:
                range_text = _range_diff(scratch, item, res)
        elif res.outcome == "upstreamed" and not dormant:
            journal.write(
                f"patches/upstreamed/{filename}", backport.applied_upstream_bytes(orig_bytes, orig.fields, onto.tag)
            )
            journal.delete(item.path)
            line_ops[item.line] = dormant_line(onto.tag, filename)
            file = f"moved to patches/upstreamed/{filename}"
        elif res.outcome == "skipped":
            journal.write(f"patches/{SKIPPED}/{filename}", orig_bytes)  # skipped work is kept, not deleted
            journal.delete(item.path)
            line_ops[item.line] = f"# skipped in the rebase onto {onto.tag}: {SKIPPED}/{filename}"
            file = f"moved to patches/{SKIPPED}/{filename}"
        elif dormant:
            final = "still upstreamed" if res.outcome == "upstreamed" else "left in patches/upstreamed"
        rows.append(Row(res, final, file, range_text))
    new_series = rewrite_series_lines(series_text, line_ops)
    if new_series != series_text:
        journal.write("patches/series", new_series.encode("utf-8"))
    if onto.commit != state.old.commit:
        pin_text = pin_path.read_text(encoding="utf-8")
        fields = wheel_pin_fields(pin, onto.tag)
        journal.write(
            "patches/upstream.yaml",
            rewrite_pin_named(pin_text, pin, {"tag": onto.tag, "commit": onto.commit}, fields).encode(),
        )
    warnings = _verify(scratch, onto.commit, new_stack, root, _others(root, pin))
    md, js = render_report(state, rows, warnings)
    (work.directory / "report.md").write_text(md, encoding="utf-8")
    write_json(work.directory / "report.json", js)
    journal.prepare()
    state.status = "committing"
    state.written = journal.dests
    state.warnings = warnings
    state.rows = rows
    save(root, state)
    for line in warnings:
        log(f"warning: {line}")
    return commit(root, state)


def commit(root: Path, state: RebaseState) -> RebaseDone:
    work = session(root)
    journal = Journal.load(root, work.txn)
    if journal is None:
        raise StateError(
            f"{work.directory}: the rebase was writing patches/ but its journal is missing", hint="--abort"
        )
    journal.apply()
    report_md, report_json = report_paths(root, state)
    report_md.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(work.directory / "report.md", report_md)
    shutil.copyfile(work.directory / "report.json", report_json)
    work.remove()
    return RebaseDone(
        old=state.old,
        onto=state.onto,
        results=state.rows,
        written=state.written,
        report=report_md,
        warnings=state.warnings,
        upstream=state.upstream,
    )


def _range_diff(scratch: GitRepo, item: Item, res: PatchResult) -> str:
    try:
        return range_diff(scratch, f"{item.old_parent}..{item.old_commit}", f"{res.parent}..{res.commit}")
    except GitError as exc:
        return f"(range-diff failed: {exc})"


def _others(root: Path, pin: UpstreamPin) -> list[Patch]:
    """The series' patches of the pins that do not move (they stay as they are, on their pins)."""
    pins = load_pins(root / "patches" / "upstream.yaml")
    if len(pins) == 1:
        return []
    roots = {p.name: p.package_root for p in pins}
    out = []
    for entry in parse_series(root / "patches" / "series"):
        patch = parse_patch(root / "patches" / entry.filename, roots)
        if patch.upstream != pin.name:
            out.append(patch)
    return out


def _verify(scratch: GitRepo, commit: str, stack: list[Patch], root: Path, others: list[Patch]) -> list[str]:
    """The new series must apply exactly; variants that no longer apply are warned about."""
    tree = CommitTree(scratch, commit)
    result = apply_stack(stack, tree)
    bad = [o for o in result.outcomes if o.method != "exact"]
    if bad:
        raise StateError(
            f"internal check failed: the rewritten {bad[0].patch} does not apply exactly to {commit[:12]} "
            f"({bad[0].method})",
            hint="nothing was written; please report this, then `imgbuild patches rebase --abort`",
        )
    # Each variant's patches of the moving pin, applied without the ones it leaves out; the other pins'
    # patches (`others`) only name groups and patches for the selection.
    try:
        configs = {v.name: v for v in (load_variant(p) for p in sorted((root / "images").glob("*.yaml")))}
        return [
            f"variant {variant.name}: {o.patch} does not apply without the patches it leaves out ({o.method})"
            for variant in resolve_variants(configs, [*stack, *others]).values()
            for o in apply_stack([p for p in stack if p.name in variant.selected], tree).outcomes
            if o.method not in ("exact", "offset")
        ]
    except ImgbuildError as exc:  # a broken images/*.yaml or selection is reported; it does not stop the rebase
        return [f"variants were not checked: {exc.message}"]
