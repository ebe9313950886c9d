"""`imgbuild patches rebase`: carry the series onto another upstream release.

The replay runs in a scratch git repository, `.imgbuild-work/rebase/tree`,
that borrows the cache mirror's objects. First the series is replayed on the
pinned release, one commit per patch: those commits hold every patch's
original blobs, so a 3-way merge never lacks its base, and they are the old
side of the report's range-diffs. Then each patch is carried onto the new
release (replay.carry_patch) and committed there. `state.json` is written
after every patch, so an interrupted run resumes where it stopped.

A conflict stops the run with the 3-way merge's markers in the work tree;
`--continue` takes the work tree as the patch, `--skip` drops the patch, and
`--abort` deletes the state. patches/ is not touched until the end, when
every changed file (patches, series, pin) is written through one journal
(export.Journal); a crash there is finished by `--continue` or undone by
`--abort`. Patches found upstreamed move to patches/upstreamed/ and leave a
`# upstreamed in TAG: FILE` line in the series, so that a later release that
reverts the change brings them back.
"""

from __future__ import annotations

import functools
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imgbuild import backport, backport_check
from imgbuild.apply import apply_stack
from imgbuild.config import load_pin, load_variant
from imgbuild.errors import ApplyError, StateError
from imgbuild.export import (
    Journal,
    check_unchanged,
    decode,
    dormant_line,
    dormant_markers,
    export_best,
    parse_text,
    rewrite_pin,
    rewrite_series_lines,
    today,
)
from imgbuild.gitio import (
    CommitTree,
    GitError,
    GitRepo,
    checkout_branch,
    commit_files,
    commit_raw,
    diff_commits,
    head_commit,
    init_scratch,
    is_ancestor,
    range_diff,
    tree_id,
)
from imgbuild.patchfile import Patch, parse_patch
from imgbuild.planner import resolve_variants
from imgbuild.project import Project
from imgbuild.rebase_report import render_report, report_paths
from imgbuild.refs import resolve_ref, wheel_pin_fields
from imgbuild.renames import RenameFinder
from imgbuild.replay import Carry, carry_patch, conflict_marker_lines, replay_series
from imgbuild.series import parse_series
from imgbuild.workdir import create_dir, locked, read_state, sha256_file, state_dir, write_json

KIND = "rebase"
SKIPPED = "skipped"  # patches/skipped/: patches dropped with --skip, kept for later
BRANCH = "imgbuild-rebase"
Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


class RebaseStopped(ApplyError):
    """The rebase stopped at a conflict; the work tree holds it."""

    def __init__(self, message: str, hint: str, info: dict[str, Any]) -> None:
        super().__init__(message, hint, {"stopped": info})
        self.info = info


@dataclass
class RebaseDone:
    old: dict[str, str]
    onto: dict[str, str]
    results: list[dict[str, Any]]
    written: list[str] = field(default_factory=list)
    report: Path | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "ok": True,
            "old": self.old,
            "onto": self.onto,
            "patches": self.results,
            "written": self.written,
            "report": str(self.report) if self.report else None,
            "warnings": self.warnings,
        }


# -- entry points ------------------------------------------------------------------
def start(
    root: Path, ref: str, *, date: str | None = None, report: Path | None = None, log: Log = _quiet
) -> RebaseDone:
    with locked(root):
        refuse_if_busy(root)
        project = Project.load(root)
        _refuse_dirty_patches(root)
        old = project.upstream
        new = resolve_ref(project.pin, ref)
        token = uuid.uuid4().hex
        items = _items(root, project)
        state: dict[str, Any] = {
            "kind": KIND,
            "version": 1,
            "token": token,
            "status": "running",
            "ref": ref,
            "old": {"tag": project.pin.tag, "commit": old.commit},
            "onto": {"tag": new.tag, "commit": new.commit},
            "today": date or today(),
            "report": str(report) if report else None,
            "inputs": _inputs(root, items),
            "items": items,
            "next": 0,
            "head": new.commit,
            "results": [],
            "stopped": None,
        }

        def build(staging: Path) -> None:
            scratch = init_scratch(staging / "tree", old.repo.path / "objects", token)
            _replay_old(root, project, scratch, old.commit, items)
            write_json(staging / "state.json", state)

        try:
            create_dir(state_dir(root, KIND), build)
        except FileExistsError as exc:
            raise StateError(f"{state_dir(root, KIND)} appeared while preparing the rebase") from exc
        log(f"rebasing {len(items)} patches from {project.pin.tag} onto {new.tag} ({new.commit[:12]})")
        return _run(root, state, log)


def resume(root: Path, action: str, *, log: Log = _quiet) -> RebaseDone:
    """`--continue` or `--skip`."""
    with locked(root):
        state = _load(root)
        if state["status"] == "committing":
            log("finishing the interrupted write of patches/")
            return _commit(root, state)
        # A patch or the series edited while the rebase was stopped: say so now, not after the last conflict.
        check_unchanged(root, state["inputs"], "the rebase")
        if action == "skip":
            if state["status"] != "stopped":
                raise StateError("nothing to skip: the rebase is not stopped at a conflict", hint="use --continue")
            item = state["items"][state["next"]]
            state["results"].append({**_base_result(item), "outcome": "skipped", "reason": "skipped by the user"})
            state["next"] += 1
            log(f"{item['filename']}: skipped; it is kept in patches/{SKIPPED}/{item['filename']}")
        elif state["status"] == "stopped":
            _take_resolution(root, state, log)
        else:
            log(f"resuming the interrupted rebase at patch {state['next'] + 1} of {len(state['items'])}")
        state["status"] = "running"
        state["stopped"] = None
        _save(root, state)
        return _run(root, state, log)


def abort(root: Path) -> str:
    with locked(root):
        state = _load(root)
        directory = state_dir(root, KIND)
        if state["status"] == "committing":
            journal = Journal.load(root, directory / "txn")
            if journal is not None:
                journal.rollback()
        shutil.rmtree(directory)
        return f"rebase onto {state['onto']['tag']} aborted; patches/ and the pin are as they were"


def status(root: Path) -> dict[str, Any] | None:
    state = read_state(state_dir(root, KIND), KIND)
    if state is None:
        return None
    return {k: state[k] for k in ("status", "old", "onto", "next", "stopped", "results")} | {
        "patches": len(state["items"]),
        "work_tree": str(state_dir(root, KIND) / "tree"),
    }


def in_progress_message(root: Path) -> str | None:
    """One line saying a rebase is in progress or was interrupted, for other commands."""
    try:
        state = read_state(state_dir(root, KIND), KIND)
    except StateError as exc:
        return exc.message
    if state is None:
        return None
    return _busy_message(root, state)


def refuse_if_busy(root: Path) -> None:
    """Refuse when a rebase or a `patches edit` work tree is open."""
    state = read_state(state_dir(root, KIND), KIND)
    if state is not None:
        raise StateError(
            _busy_message(root, state),
            hint="run `imgbuild patches rebase --continue` (or --skip), or `--abort` to drop it",
        )
    pq = state_dir(root, "pq")
    if pq.exists():
        raise StateError(
            f"a `patches edit` work tree is open at {pq / 'tree'}",
            hint="run `imgbuild patches refresh --close` or `imgbuild patches edit --discard` first",
        )


# -- state ---------------------------------------------------------------------------
def _busy_message(root: Path, state: dict[str, Any]) -> str:
    tree = state_dir(root, KIND) / "tree"
    onto = state["onto"]["tag"]
    if state["status"] == "stopped":
        stopped = state["stopped"] or {}
        return (
            f"a rebase onto {onto} is in progress, stopped at {stopped.get('filename')} (conflict); work tree: {tree}"
        )
    if state["status"] == "committing":
        return f"a rebase onto {onto} was interrupted while writing patches/; work tree: {tree}"
    return (
        f"a rebase onto {onto} was interrupted at patch {state['next'] + 1} of {len(state['items'])}; work tree: {tree}"
    )


def _load(root: Path) -> dict[str, Any]:
    state = read_state(state_dir(root, KIND), KIND)
    if state is None:
        raise StateError("no rebase is in progress", hint="start one with `imgbuild patches rebase --onto REF`")
    return state


def _save(root: Path, state: dict[str, Any]) -> None:
    write_json(state_dir(root, KIND) / "state.json", state)


def _refuse_dirty_patches(root: Path) -> None:
    try:
        repo = GitRepo(root)
        out = repo.run("status", "--porcelain", "--", "patches")
    except GitError:
        return  # not a git checkout: nothing to compare with
    if out.strip():
        raise StateError(
            f"patches/ has uncommitted changes:\n{out.rstrip()}",
            hint="commit or stash them first, so the rebase's result can be reviewed as one change",
        )


def _items(root: Path, project: Project) -> list[dict[str, Any]]:
    series_path = root / "patches" / "series"
    entries: list[tuple[int, str, bool, str | None]] = [
        (e.line, e.filename, False, None) for e in parse_series(series_path)
    ]
    text = series_path.read_text(encoding="utf-8")
    listed = {e[1] for e in entries}
    for line, tag, filename in dormant_markers(text):
        if filename not in listed and (root / "patches" / "upstreamed" / filename).is_file():
            entries.append((line, filename, True, tag))
    items = []
    for number, name, dormant, marker in sorted(entries, key=lambda e: e[0]):
        items.append(
            {
                "filename": name,
                "line": number,
                "dormant": dormant,
                "dormant_tag": marker,
                "path": f"patches/upstreamed/{name}" if dormant else f"patches/{name}",
                "old_commit": None,
                "old_parent": None,
                "blobs": {},
            }
        )
    return items


def _inputs(root: Path, items: list[dict[str, Any]]) -> dict[str, str | None]:
    paths = ["patches/series", "patches/upstream.yaml", *(i["path"] for i in items)]
    return {p: sha256_file(root / p) for p in paths}


def _replay_old(root: Path, project: Project, scratch: GitRepo, base: str, items: list[dict[str, Any]]) -> None:
    """Commit the series on the pinned release; record each patch's original blobs."""
    steps = {s.patch.filename: s for s in replay_series(project.patches, CommitTree(scratch, base))}
    head = base
    for item in items:
        step = steps.get(item["filename"])
        if step is None:
            continue
        if not step.outcome.ok or step.outcome.method in ("fuzz",):
            bad = "; ".join(f"{f.path}: {f.reason or f.method}" for f in step.outcome.files if f.method == "conflict")
            raise ApplyError(
                f"{item['filename']} does not apply to the pinned release {project.pin.tag} "
                f"({bad or step.outcome.method})",
                hint="the series must apply where it is before it can move: run `imgbuild patches check`",
            )
        commit = commit_files(scratch, head, step.own, _message(item["filename"]))
        item["old_parent"], item["old_commit"] = head, commit
        item["blobs"] = {old: scratch.write_blob(data) for old, data in step.pre.items()}
        head = commit


def _base_result(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "filename": item["filename"],
        "dormant": item["dormant"],
        "commit": None,
        "parent": None,
        "reason": "",
        "moves": [],
        "dropped_hunks": [],
        "upstreamed_checks": [],
        "files": [],
    }


def _result(item: dict[str, Any], carry: Carry) -> dict[str, Any]:
    data = carry.to_json()
    return {
        **_base_result(item),
        "outcome": carry.outcome,
        "reason": carry.reason,
        "moves": data["moves"],
        "dropped_hunks": data["dropped_hunks"],
        "upstreamed_checks": data["upstreamed_checks"],
        "files": data["files"],
    }


def _message(filename: str) -> str:
    """The same message on both sides, so range-diffs show only the patch's change."""
    return f"{filename}\n"


# -- the replay loop -------------------------------------------------------------------
def _run(root: Path, state: dict[str, Any], log: Log) -> RebaseDone:
    directory = state_dir(root, KIND)
    scratch = GitRepo(directory / "tree")
    package_root = load_pin(root / "patches" / "upstream.yaml").package_root
    old_commit, onto = state["old"]["commit"], state["onto"]
    finder = RenameFinder(scratch, lambda: old_commit, onto["commit"])
    items = state["items"]
    while state["next"] < len(items):
        item = items[state["next"]]
        path = root / item["path"]
        raw = path.read_bytes()
        patch = parse_patch(path, package_root)
        blobs = {old: scratch.read_blob(sha) for old, sha in item["blobs"].items()}
        head = state["head"]
        carry = carry_patch(
            patch,
            CommitTree(scratch, head),
            {},
            finder=finder,
            raw=decode(raw),
            blobs=blobs,
            label=f"upstream {onto['tag']}",
        )
        carry = backport_check.recognise(carry, decode(raw), scratch, old_commit, onto["commit"], onto["tag"])
        result = _result(item, carry)
        if carry.carried and carry.changes:
            commit = commit_files(scratch, head, carry.changes, _message(item["filename"]))
            result.update(commit=commit, parent=head)
            state["head"] = commit
        elif carry.outcome == "conflict" and not item["dormant"]:
            raise _stop(root, state, item, carry, raw)
        elif carry.carried:
            result.update(outcome="upstreamed", reason="applies, but changes nothing")
        log(_progress(item, result))
        state["results"].append(result)
        state["next"] += 1
        _save(root, state)
    return _finish(root, state, log)


def _progress(item: dict[str, Any], result: dict[str, Any]) -> str:
    outcome = result["outcome"]
    if item["dormant"]:
        outcome = {"upstreamed": "still upstreamed"}.get(
            outcome, "reinstated" if result["commit"] else f"left out ({outcome})"
        )
    moves = "".join(f"; {m['old']} -> {m['new']}" for m in result["moves"])
    dropped = f"; {len(result['dropped_hunks'])} hunk(s) already upstream" if result["dropped_hunks"] else ""
    return f"{item['filename']}: {outcome}{moves}{dropped}"


def _stop(root: Path, state: dict[str, Any], item: dict[str, Any], carry: Carry, raw: bytes) -> RebaseStopped:
    directory = state_dir(root, KIND)
    tree = directory / "tree"
    scratch = GitRepo(tree)
    checkout_branch(scratch, BRANCH, state["head"])
    clean = []
    for path, data in sorted(carry.changes.items()):
        target = tree / path
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        clean.append(path)
    if clean:
        scratch.run("add", "-A", "--", *clean)
    markers = {}
    for path, data in sorted(carry.conflicts.items()):
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        markers[path] = conflict_marker_lines(data)
    (directory / "current.patch").write_bytes(raw)
    unresolved = [
        {"path": f.path, "reason": f.reason}
        for f in carry.files
        if f.method == "conflict" and f.path not in carry.conflicts
    ]
    info = {
        "filename": item["filename"],
        "work_tree": str(tree),
        "patch": str(directory / "current.patch"),
        "conflicts": {p: lines for p, lines in markers.items()},
        "unresolved": unresolved,
        "applied": clean,
        "reason": carry.reason,
        "moves": [m.to_json() for m in carry.moves],
    }
    state["status"] = "stopped"
    state["stopped"] = info
    _save(root, state)
    lines = [f"rebase stopped at {item['filename']}: it does not apply to {state['onto']['tag']}"]
    lines.append(f"  work tree:   {tree}")
    for path, at in markers.items():
        lines.append(f"  conflict:    {path} (markers at line {', '.join(map(str, at))})")
    for u in unresolved:
        lines.append(f"  not applied: {u['path']}: {u['reason']}")
    if clean:
        lines.append(f"  applied:     {', '.join(clean)} (staged)")
    lines.append(f"  the patch:   {directory / 'current.patch'}")
    hint = (
        "edit the files in the work tree until they hold the patch as it should be on the new release "
        "(no conflict markers left), then run `imgbuild patches rebase --continue`; "
        "`--skip` drops this patch from the series; `--abort` puts patches/ and the pin back exactly as they were"
    )
    return RebaseStopped("\n".join(lines), hint, info)


def _take_resolution(root: Path, state: dict[str, Any], log: Log) -> None:
    """Commit the work tree as the stopped patch, squashing any commits the user made."""
    tree = state_dir(root, KIND) / "tree"
    scratch = GitRepo(tree)
    head = state["head"]
    current = head_commit(scratch)
    if current is None or not is_ancestor(scratch, head, current):
        raise StateError(
            f"the work tree {tree} is no longer on the rebase (HEAD {current} does not descend from {head[:12]})",
            hint="check out the rebase branch again, or `imgbuild patches rebase --abort`",
        )
    untracked = [p for p in scratch.run("ls-files", "--others", "--exclude-standard", "-z").split("\0") if p]
    if untracked:
        raise StateError(
            f"new file(s) in the work tree that are not added to git: {', '.join(untracked[:10])}; "
            f"--continue would leave them out of {state['stopped']['filename']}",
            hint=f"`git -C {tree} add FILE` to put a file in the patch, or delete it; then run --continue again",
        )
    scratch.run("add", "-u")
    changed = [p for p in scratch.run("diff", "--cached", "--name-only", "-z", head).split("\0") if p]
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
    new_tree = scratch.run("write-tree").strip()
    if new_tree == tree_id(scratch, head):
        raise StateError(
            f"the work tree {tree} holds no change for {state['stopped']['filename']}",
            hint="make the change (and `git add` new files), or drop the patch with `imgbuild patches rebase --skip`",
        )
    item = state["items"][state["next"]]
    commit = commit_raw(scratch, new_tree, [head], _message(item["filename"]))
    stopped = state["stopped"] or {}
    result = {
        **_base_result(item),
        "outcome": "resolved",
        "reason": "conflict resolved by hand: " + (stopped.get("reason") or ""),
        "moves": stopped.get("moves", []),
        "commit": commit,
        "parent": head,
    }
    state["results"].append(result)
    state["head"] = commit
    state["next"] += 1
    log(f"{item['filename']}: resolved by hand")


# -- the end: write patches/, the series and the pin in one step ------------------------
def _finish(root: Path, state: dict[str, Any], log: Log) -> RebaseDone:
    directory = state_dir(root, KIND)
    check_unchanged(root, state["inputs"], "the rebase")
    scratch = GitRepo(directory / "tree")
    pin_path = root / "patches" / "upstream.yaml"
    pin = load_pin(pin_path)
    onto, date = state["onto"], state["today"]
    journal = Journal(root, directory / "txn")
    series_text = (root / "patches" / "series").read_text(encoding="utf-8")
    line_ops: dict[int, str | None] = {}
    new_stack: list[Patch] = []
    rows = []
    for item, res in zip(state["items"], state["results"], strict=True):
        filename, dormant = item["filename"], item["dormant"]
        orig_bytes = (root / item["path"]).read_bytes()
        orig = parse_patch(root / item["path"], pin.package_root)
        row = {**res, "file": "unchanged", "range_diff": ""}
        if res["commit"]:
            parent, commit = res["parent"], res["commit"]
            exported, _ = export_best(
                functools.partial(_diff, scratch, parent, commit),
                orig_bytes,
                orig,
                orig.header,
                filename=filename,
                package_root=pin.package_root,
                date=date,
            )
            data = exported.data
            if dormant:
                data = backport.applied_upstream_bytes(data or orig_bytes, orig.fields, "")
                journal.delete(item["path"])
                line_ops[item["line"]] = filename
                row["outcome"] = "reinstated"
            if data is not None:
                journal.write(f"patches/{filename}", data)
                row["file"] = "reinstated" if dormant else "re-exported"
            new_stack.append(parse_text(filename, decode(data or orig_bytes), pin.package_root))
            if item["old_commit"] and data is not None:
                row["range_diff"] = _range_diff(scratch, item, res)
        elif res["outcome"] == "upstreamed" and not dormant:
            journal.write(
                f"patches/upstreamed/{filename}", backport.applied_upstream_bytes(orig_bytes, orig.fields, onto["tag"])
            )
            journal.delete(item["path"])
            line_ops[item["line"]] = dormant_line(onto["tag"], filename)
            row["file"] = f"moved to patches/upstreamed/{filename}"
        elif res["outcome"] == "skipped":
            journal.write(f"patches/{SKIPPED}/{filename}", orig_bytes)  # skipped work is kept, not deleted
            journal.delete(item["path"])
            line_ops[item["line"]] = f"# skipped in the rebase onto {onto['tag']}: {SKIPPED}/{filename}"
            row["file"] = f"moved to patches/{SKIPPED}/{filename}"
        elif dormant:
            row["outcome"] = (
                "still upstreamed"
                if res["outcome"] == "upstreamed"
                else f"left in patches/upstreamed ({res['outcome']})"
            )
        rows.append(row)
    new_series = rewrite_series_lines(series_text, line_ops)
    if new_series != series_text:
        journal.write("patches/series", new_series.encode("utf-8"))
    if onto["commit"] != state["old"]["commit"]:
        pin_text = pin_path.read_text(encoding="utf-8")
        fields = wheel_pin_fields(pin, onto["tag"])
        journal.write(
            "patches/upstream.yaml",
            rewrite_pin(pin_text, pin, {"tag": onto["tag"], "commit": onto["commit"]}, fields).encode(),
        )
    warnings = _verify(scratch, onto["commit"], new_stack, root)
    md, js = render_report(state, rows, warnings)
    (directory / "report.md").write_text(md, encoding="utf-8")
    write_json(directory / "report.json", js)
    journal.prepare()
    state["status"] = "committing"
    state["written"] = journal.dests
    state["warnings"] = warnings
    keys = ("filename", "outcome", "file", "reason", "moves", "dropped_hunks", "upstreamed_checks")
    state["rows"] = [{"patch": r["filename"], **{k: r.get(k, []) for k in keys}} for r in rows]
    _save(root, state)
    for line in warnings:
        log(f"warning: {line}")
    return _commit(root, state)


def _commit(root: Path, state: dict[str, Any]) -> RebaseDone:
    directory = state_dir(root, KIND)
    journal = Journal.load(root, directory / "txn")
    if journal is None:
        raise StateError(f"{directory}: the rebase was writing patches/ but its journal is missing", hint="--abort")
    journal.apply()
    report_md, report_json = report_paths(root, state)
    report_md.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(directory / "report.md", report_md)
    shutil.copyfile(directory / "report.json", report_json)
    shutil.rmtree(directory)
    return RebaseDone(
        old=state["old"],
        onto=state["onto"],
        results=state.get("rows", []),
        written=state.get("written", []),
        report=report_md,
        warnings=state.get("warnings", []),
    )


def _diff(repo: GitRepo, old: str, new: str, context: int) -> str:
    return diff_commits(repo, old, new, context=context)


def _range_diff(scratch: GitRepo, item: dict[str, Any], res: dict[str, Any]) -> str:
    try:
        return range_diff(scratch, f"{item['old_parent']}..{item['old_commit']}", f"{res['parent']}..{res['commit']}")
    except GitError as exc:
        return f"(range-diff failed: {exc})"


def _verify(scratch: GitRepo, commit: str, stack: list[Patch], root: Path) -> list[str]:
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
    warnings = []
    try:
        configs = {v.name: v for v in (load_variant(p) for p in sorted((root / "images").glob("*.yaml")))}
        for variant in resolve_variants(configs, stack).values():
            chosen = [p for p in stack if p.name in variant.selected]
            outcome = apply_stack(chosen, tree)
            for o in outcome.outcomes:
                if o.method not in ("exact", "offset"):
                    warnings.append(
                        f"variant {variant.name}: {o.patch} does not apply without the patches it leaves out "
                        f"({o.method})"
                    )
    except Exception as exc:  # noqa: BLE001 - variant trouble is reported, it does not stop the rebase
        warnings.append(f"variants were not checked: {getattr(exc, 'message', exc)}")
    return warnings
