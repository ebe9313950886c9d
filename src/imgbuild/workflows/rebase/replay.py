"""The replay of `patches rebase`: the series committed on the pinned release, then each patch carried
onto the new one and committed; a conflict stops with markers in the work tree, and --continue takes the
resolution from there."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import cast

from imgbuild.errors import PatchError, StateError
from imgbuild.patches.carry import Carry, carry_patch, conflict_marker_lines
from imgbuild.patches.hunks import decode
from imgbuild.patches.patchfile import REQUIRED_FIELDS, header_of, parse_bytes, parse_header
from imgbuild.patches.renames import RenameFinder
from imgbuild.progress import Say
from imgbuild.project import Project
from imgbuild.shapes import dump
from imgbuild.upstream.commits import checkout_branch, commit_files, commit_raw, is_ancestor
from imgbuild.upstream.git import CommitTree, GitRepo
from imgbuild.workflows import backport_check
from imgbuild.workflows.rebase import carry_preview
from imgbuild.workflows.rebase.finish import finish
from imgbuild.workflows.rebase.state import (
    Item,
    PatchResult,
    RebaseDone,
    RebaseState,
    RebaseStopped,
    Record,
    Stopped,
    Unresolved,
    message,
    moving_pin,
    save,
    session,
)
from imgbuild.workflows.writeback import commit_series

BRANCH = "imgbuild-rebase"
RECORDS = ("moves", "dropped_hunks", "upstreamed_checks", "files")  # what a PatchResult keeps of Carry.shown


def replay_old(project: Project, scratch: GitRepo, base: str, state: RebaseState) -> None:
    """Commit the moving pin's patches on its pinned release; record each patch's original blobs."""
    mine = project.patches_of(state.upstream or project.pin.name)
    at = {item.filename: index for index, item in enumerate(state.items)}
    for step, parent, commit in commit_series(scratch, base, mine, state.old.tag, lambda p: message(p.filename)):
        blobs = {old: scratch.write_blob(data) for old, data in step.pre.items()}
        state.set_item(at[step.patch.filename], old_parent=parent, old_commit=commit, blobs=blobs)


def _result(item: Item, carry: Carry) -> PatchResult:
    """The patch's result with the carry's report (as `patches check --onto` has it; files: per hunk)."""
    data = dump(carry.shown())
    return PatchResult.of(item, carry.outcome, carry.reason, **{k: data[k] for k in RECORDS})


def run(root: Path, state: RebaseState, say: Say) -> RebaseDone:
    scratch = session(root).scratch()
    package_root = moving_pin(root, state).package_root
    old_commit, onto = state.old.commit, state.onto
    finder = RenameFinder(scratch, old_commit, onto.commit)
    while state.next < len(state.items):
        item = state.current
        raw = (root / item.path).read_bytes()
        patch, text = parse_bytes(item.filename, raw, package_root), decode(raw)
        blobs = {old: scratch.read_blob(sha) for old, sha in item.blobs.items()}
        head = state.head
        carry = carry_patch(
            patch,
            CommitTree(scratch, head),
            {},
            finder=finder,
            raw=text,
            blobs=blobs.get,
            label=f"upstream {onto.tag}",
        )
        carry = backport_check.recognise(carry, text, scratch, old_commit, onto.commit, onto.tag)
        result = _result(item, carry)
        new_head = None
        if carry.carried and carry.changes:
            new_head = commit_files(scratch, head, carry.changes, message(item.filename))
            result = replace(result, commit=new_head, parent=head)
        elif carry.outcome == "conflict" and not item.dormant:
            raise _stop(root, state, item, carry, raw)
        elif carry.carried:
            result = replace(result, outcome="upstreamed", reason="applies, but changes nothing")
        say(_progress(item, result))
        state.record(result, new_head)
        save(root, state)
    return finish(root, state, say)


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
    report = dump(carry.shown())
    pending = carry_preview.preview(
        scratch,
        state.items[state.next + 1 :],
        lambda i: (root / i.path).read_bytes(),
        package_root=moving_pin(root, state).package_root,
        old=state.old.commit,
        head=state.head,
        onto=state.onto.commit,
        tag=state.onto.tag,
    )
    stopped = Stopped(
        filename=item.filename,
        work_tree=str(tree),
        patch=str(current),
        conflicts=markers,
        unresolved=unresolved,
        applied=tuple(clean),
        reason=carry.reason,
        moves=tuple(cast("list[Record]", report["moves"])),
        files=tuple(cast("list[Record]", report["files"])),
        pending=tuple(dump(p.shown()) for p in pending),
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
    if pending:
        lines.append("  still to carry (each carried now in memory, as `patches check --onto` does):")
        lines += [f"    {p.filename}{' (in patches/upstreamed/)' if p.dormant else ''}: {p.summary}" for p in pending]
    hint = (
        "edit the files in the work tree until they hold the patch as it should be on the new release "
        "(no conflict markers left), and say in the DEP-3 header of the patch file above what the patch does "
        "there (kept at --continue; `Applied-Upstream:` for what upstream took), "
        "then run `imgbuild patches rebase --continue`; "
        "`--skip` drops this patch from the series; `--abort` puts patches/ and the pin back exactly as they were"
    )
    return RebaseStopped("\n".join(lines), hint, stopped)


def take_resolution(root: Path, state: RebaseState, say: Say) -> None:
    """Commit the work tree as the stopped patch, squashing any commits the user made."""
    work = session(root)
    tree = work.tree
    scratch = work.scratch()
    head = state.head
    item = state.current
    current = scratch.resolve_commit("HEAD")
    if current is None or not is_ancestor(scratch, head, current):
        raise StateError(
            f"the work tree {tree} is no longer on the rebase (HEAD {current} does not descend from {head[:12]})",
            hint="check out the rebase branch again, or `imgbuild patches rebase --abort`",
        )
    untracked = [p for p in scratch.run("ls-files", "--others", "--exclude-standard", "-z").split("\0") if p]
    if untracked:
        raise StateError(
            f"new file(s) in the work tree that are not added to git: {', '.join(untracked[:10])}; "
            f"--continue would leave them out of {item.filename}",
            hint=f"`git -C {tree} add FILE` to put a file in the patch, or delete it; then run --continue again",
        )
    scratch.run("add", "-u")
    changed = [p for p in scratch.run("diff", "--cached", "--name-only", "-z", head).split("\0") if p]
    if not changed:
        raise StateError(
            f"the work tree {tree} holds no change for {item.filename}",
            hint="make the change (and `git add` new files), or drop the patch with `imgbuild patches rebase --skip`",
        )
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
    header = _edited_header(root, item, work.directory / "current.patch")
    commit = commit_raw(scratch, scratch.run("write-tree").strip(), [head], message(item.filename))
    stopped = state.stopped
    result = PatchResult.of(
        item,
        "resolved",
        _resolved_reason(stopped),
        moves=stopped.moves if stopped else (),
        commit=commit,
        parent=head,
        header=header,
    )
    state.record(result, commit)
    say(f"{item.filename}: resolved by hand")


def _edited_header(root: Path, item: Item, current: Path) -> str | None:
    """The DEP-3 header of `current.patch` when the author rewrote it at the stop (None when unchanged): it
    becomes the patch's header, so a patch resolved by hand says what it does on the new release in the same
    change. Its diff part is not read; the work tree is the patch. A header missing a required field is refused
    here, before anything is committed."""
    try:
        header = header_of(current.name, current.read_bytes())
    except FileNotFoundError:
        return None
    original = header_of(item.filename, (root / item.path).read_bytes())
    if header == original:
        return None
    missing = [f for f in REQUIRED_FIELDS if not parse_header(header).get(f, "").strip()]
    if missing:
        raise PatchError(
            f"{current}: the header you edited lacks {', '.join(missing)}",
            hint="add the field(s) to the header above `diff --git` (DEP-3), or put the header back; "
            "then run --continue again",
        )
    return header


def _resolved_reason(stopped: Stopped | None) -> str:
    """What the report says of a patch resolved by hand: the files that conflicted, not the stop's advice
    (`--allow-fuzz`, `patches edit`), which is stale once the author has resolved them."""
    if stopped is None:
        return "conflict resolved by hand"
    files = [*stopped.conflicts, *(u.path for u in stopped.unresolved)]
    return "conflict resolved by hand: " + ", ".join(files) if files else "conflict resolved by hand"
