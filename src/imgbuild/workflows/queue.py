"""`imgbuild patches edit` / `patches refresh`: the series as a git branch (like gbp pq).

`edit` makes `.imgbuild-work/pq/tree`, the pinned release with one commit per patch on branch `patches`,
each message the patch's DEP-3 header plus a `Patch-Name:` trailer. `refresh` writes the branch back:
unchanged patches keep their bytes, a changed diff keeps its header (Last-Update bumped), an edited
header comes from the message, a new commit becomes a new patch; patches/ is written as one step.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from imgbuild.atomic import write_json
from imgbuild.config.models import UpstreamPin
from imgbuild.errors import PatchError, StateError
from imgbuild.patches.apply import apply_stack
from imgbuild.patches.hunks import encode
from imgbuild.patches.patchfile import Patch, parse_bytes, parse_header
from imgbuild.project import Project
from imgbuild.shapes import PathText
from imgbuild.upstream.commits import (
    CommitInfo,
    checkout_branch,
    commit_raw,
    diff_commits,
    is_ancestor,
    read_commit,
    rev_list,
    status_porcelain,
)
from imgbuild.upstream.git import CommitTree, GitRepo, failed, run_git
from imgbuild.workflows.workspace import Session, state_dir
from imgbuild.workflows.writeback import (
    Journal,
    bump_last_update,
    check_unchanged,
    commit_series,
    context_of,
    export_patch,
    reorder_series,
    today,
)

KIND = "pq"
BRANCH = "patches"
TRAILER = "Patch-Name"
TRAILER_RE = re.compile(rf"^{TRAILER}:[ \t]*(\S+)[ \t]*$")
NUMBERED = re.compile(r"^(\d{4})-")


@dataclass
class Opened:
    """An open `patches edit` work tree."""

    work_tree: PathText
    base: str
    tag: str
    commits: int
    created: bool


@dataclass
class Refreshed:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    series_changed: bool = False
    warnings: list[str] = field(default_factory=list)
    closed: bool = False


# -- commit messages -------------------------------------------------------------------
def to_message(header: str, filename: str) -> str:
    if not header:
        return f"{TRAILER}: {filename}\n"
    return f"{_ensure_nl(header)}\n{TRAILER}: {filename}\n"


def from_message(message: str) -> tuple[str | None, str]:
    """(file name from the trailer or None, the header text)."""
    lines = message.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        m = TRAILER_RE.match(lines[i].rstrip("\r\n"))
        if m:
            rest = lines[:i] + lines[i + 1 :]
            if i == len(rest) and rest and not rest[-1].strip():
                rest = rest[:-1]  # the blank line to_message put before the trailer
            return m.group(1), "".join(rest)
        if lines[i].strip() and not re.match(r"^[A-Za-z][A-Za-z0-9-]*:", lines[i]):
            break  # past the trailer block
    return None, message


def _stripspace(text: str, *flags: str) -> bytes:
    done = run_git(["stripspace", *flags], stdin=encode(text))
    if done.returncode != 0:
        raise failed("git stripspace", done)
    return done.stdout


def same_header(edited: str, original: str) -> bool:
    """Whether the two differ only by what git's message cleanup does (`git stripspace`, comments or not)."""
    return any(_stripspace(edited, *f) == _stripspace(original, *f) for f in ((), ("--strip-comments",)))


def new_header(message: str, author: str, date: str) -> str:
    """A DEP-3 header for a commit that has no patch yet."""
    if parse_header(message).get("Description") or parse_header(message).get("Subject"):
        return _ensure_nl(message)
    lines = message.strip("\n").splitlines() or ["(no description)"]
    trailers: dict[str, str] = {}
    while lines and (m := re.match(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$", lines[-1])):
        trailers[m.group(1)] = m.group(2)
        lines.pop()
    while lines and not lines[-1].strip():
        lines.pop()
    body = lines[1:]
    while body and not body[0].strip():
        body.pop(0)
    description = [f"Description: {lines[0]}"] + [f" {ln}" if ln.strip() else " ." for ln in body]
    fields = {
        "Author": author,
        "Origin": "vendor",
        "Forwarded": "no",
        "Upstream-Status": "Pending",
        "Group": "",
        **trailers,
        "Last-Update": date,
    }
    return "\n".join(description + [f"{k}: {v}".rstrip() for k, v in fields.items()]) + "\n---\n"


def new_filename(subject: str, taken: set[str]) -> str:
    numbers = [int(m.group(1)) for n in taken if (m := NUMBERED.match(n))]
    slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:50].strip("-") or "patch"
    prefix = f"{max(numbers) + 1:04d}-" if numbers else ""
    name = f"{prefix}{slug}.patch"
    n = 2
    while name in taken:
        name = f"{prefix}{slug}-{n}.patch"
        n += 1
    return name


def session(root: Path) -> Session:
    return Session(root, KIND)


# -- edit ---------------------------------------------------------------------------------
def open_queue(root: Path, upstream: str | None = None) -> Opened:
    """Open the work tree of one pin's patches (`upstream`: a pin's name; default the first pin) on its release."""
    work = session(root)
    with work.locked():
        rebase_dir = state_dir(root, "rebase")
        if rebase_dir.exists():
            raise StateError(
                f"a rebase is in progress (work tree {rebase_dir / 'tree'})",
                hint="finish it (`imgbuild patches rebase --continue`) or `--abort` it first",
            )
        state = work.read()
        project = Project.load(root)
        pin = project.pin_named(upstream) if upstream else project.pin
        if state is not None:
            open_on = state.get("upstream") or project.pin.name
            if upstream and open_on != pin.name:
                raise StateError(
                    f"a `patches edit` work tree of the {open_on} patches is open at {work.tree}",
                    hint="`imgbuild patches refresh --close` (or `patches edit --discard`) it first",
                )
            count = len(rev_list(work.scratch(), state["base"], "HEAD"))
            return Opened(work.tree, state["base"], state["tag"], count, False)
        release = project.resolved(pin.name)
        token = uuid.uuid4().hex
        entries: list[dict[str, Any]] = []

        def fill(scratch: GitRepo, staging: Path) -> None:
            mine = project.patches_of(pin.name)  # this pin's; the others stay as they are
            steps = commit_series(scratch, release.commit, mine, pin.tag, lambda p: to_message(p.header, p.filename))
            entries.extend({"filename": step.patch.filename, "commit": commit} for step, _, commit in steps)
            head = entries[-1]["commit"] if entries else release.commit
            checkout_branch(scratch, BRANCH, head)
            state = {"kind": KIND, "version": 1, "token": token, "base": release.commit, "tag": pin.tag}
            state["upstream"] = pin.name
            write_json(staging / "state.json", {**state, "patches": entries, "inputs": _inputs(work, entries)})

        work.create(release.repo.path / "objects", token, fill)
        return Opened(work.tree, release.commit, pin.tag, len(entries), True)


def _inputs(work: Session, entries: list[dict[str, Any]]) -> dict[str, str | None]:
    return work.inputs(f"patches/{e['filename']}" for e in entries)


@dataclass(frozen=True)
class Discarded:
    """The `patches edit` work tree removed (or none was open)."""

    ok: Literal[True]
    message: str


def discard(root: Path, *, force: bool = False) -> Discarded:
    work = session(root)
    with work.locked():
        directory = work.directory
        state = work.read()
        if state is None:
            return Discarded(True, "no `patches edit` work tree is open")
        scratch = work.scratch()
        if not force:
            dirty = status_porcelain(scratch)
            synced = state.get("synced") or (state["patches"][-1]["commit"] if state["patches"] else state["base"])
            if dirty or scratch.resolve_commit("HEAD") != synced:
                raise StateError(
                    f"the work tree {work.tree} has work that is not in patches/ yet",
                    hint="run `imgbuild patches refresh` first, or pass --force to throw it away",
                )
        work.remove()
        return Discarded(True, f"removed {directory}")


# -- refresh -------------------------------------------------------------------------------
def refresh(root: Path, *, close: bool = False, date: str | None = None) -> Refreshed:
    date = date or today()
    work = session(root)
    with work.locked():
        state = work.read()
        if state is None:
            raise StateError("no `patches edit` work tree is open", hint="run `imgbuild patches edit` first")
        journal = Journal.load(root, work.txn)
        if journal is not None:  # an earlier refresh died while writing patches/: finish it
            journal.apply()
            journal.discard()
            state["inputs"] = _inputs(work, state["patches"])
            work.save(state)
        tree = work.tree
        scratch = work.scratch()
        project = Project.load(root)
        pin = project.pin_named(state.get("upstream") or project.pin.name)
        if pin.commit != state["base"]:
            raise StateError(
                f"the {pin.name} pin moved to {pin.tag} since `patches edit` (the work tree is on {state['tag']})",
                hint="discard the work tree (`imgbuild patches edit --discard --force`) and edit again",
            )
        check_unchanged(root, state["inputs"], "the `patches edit`")
        dirty = status_porcelain(scratch)
        if dirty:
            raise StateError(
                f"the work tree {tree} has uncommitted changes:\n" + "\n".join(dirty[:20]),
                hint="commit them (`git commit --amend` changes a patch, `git commit` adds one), or discard them",
            )
        head = scratch.resolve_commit("HEAD")
        if head is None or not is_ancestor(scratch, state["base"], head):
            raise StateError(
                f"HEAD of {tree} does not descend from the pinned release {state['tag']} ({state['base'][:12]})",
                hint=f"rebase your commits onto {state['base'][:12]} in the work tree",
            )
        result, commits, journal = _export(work, project, pin, scratch, state, head, date)
        journal.prepare()
        state["patches"] = [{"filename": name, "commit": info.sha} for info, name, _ in commits if name]
        work.save(state)  # the journal is prepared: a crash now is finished later
        journal.apply()
        journal.discard()
        renamed = _sync_messages(scratch, state["base"], commits)
        state["patches"] = [{"filename": name, "commit": sha} for name, sha in renamed]
        state["inputs"] = _inputs(work, state["patches"])
        state["synced"] = scratch.resolve_commit("HEAD")
        work.save(state)
        if close:
            work.remove()
            result.closed = True
        return result


Final = tuple[CommitInfo, str | None, str | None]  # commit, its patch file, the header that file now has


def _export(
    work: Session, project: Project, pin: UpstreamPin, scratch: GitRepo, state: dict[str, Any], head: str, date: str
) -> tuple[Refreshed, list[Final], Journal]:
    root = work.root
    package_root = pin.package_root
    originals = {p.filename: p for p in project.patches_of(pin.name)}
    further = pin.name if pin.name != project.pin.name else None  # a new patch of it names its upstream
    journal = Journal(root, work.txn)
    result = Refreshed()
    commits: list[Final] = []
    stack: list[Patch] = []
    for sha in rev_list(scratch, state["base"], head):
        info = read_commit(scratch, sha)
        if len(info.parents) != 1:
            raise StateError(f"commit {sha[:12]} is a merge; the series must be a straight line", hint="rebase it flat")
        filename, header = from_message(info.message)
        if filename is not None and (("/" in filename) or not filename.endswith((".patch", ".diff"))):
            raise PatchError(f"commit {sha[:12]}: {TRAILER}: {filename!r} is not a patch file name")
        if any(p.filename == filename for p in stack):
            raise StateError(f"commits {sha[:12]} and an earlier one both say {TRAILER}: {filename}", hint="rename one")
        original = originals.get(filename) if filename else None
        diff = diff_commits(scratch, info.parents[0], sha, context=context_of(original) if original else 3)
        if not diff:
            if original is not None:
                result.warnings.append(f"{filename}: its commit is empty; patches/{filename} is left as it was")
                commits.append((info, original.filename, original.header))
                stack.append(original)
            else:
                result.warnings.append(f"commit {sha[:12]} changes nothing; ignored")
                commits.append((info, None, None))
            continue
        if original is not None:
            orig_bytes = (project.patches_dir / original.filename).read_bytes()
            unchanged_header = same_header(header, original.header)
            exported = export_patch(
                scratch,
                info.parents[0],
                sha,
                orig_bytes,
                original,
                original.header if unchanged_header else _ensure_nl(header),
                package_root=package_root,
                date=date,
                header_changed=not unchanged_header,
            )
            if exported is not None:
                journal.write(f"patches/{original.filename}", exported)
                result.written.append(original.filename)
            else:
                result.unchanged.append(original.filename)
            data = exported or orig_bytes
            name = original.filename
        else:
            subject = (header.strip().splitlines() or ["patch"])[0]
            taken = {p.filename for p in [*project.patches, *stack]}
            name = filename or new_filename(subject.removeprefix("Description:").strip(), taken)
            data = encode(bump_last_update(with_upstream(new_header(header, info.author, date), further), date) + diff)
            journal.write(f"patches/{name}", data)
            result.added.append(name)
        patch = parse_bytes(name, data, package_root)
        stack.append(patch)
        commits.append((info, name, patch.header))
    order = [p.filename for p in stack]
    for name in originals:
        if name not in order:
            journal.delete(f"patches/{name}")
            result.removed.append(name)
    series_path = root / "patches" / "series"
    text = series_path.read_text(encoding="utf-8")
    new_text = reorder_series(text, _with_other_pins(project, originals, order))
    if new_text != text:
        journal.write("patches/series", new_text.encode("utf-8"))
        result.series_changed = True
    check = apply_stack(stack, CommitTree(scratch, state["base"]))
    bad = [o for o in check.outcomes if o.method not in ("exact", "offset", "upstreamed")]
    if bad:
        raise StateError(f"internal check: {bad[0].patch} would not apply ({bad[0].method}); nothing was written")
    return result, commits, journal


def with_upstream(header: str, upstream: str | None) -> str:
    """A new patch's header with `Upstream: NAME` (a patch of a further pin), unless it names one already."""
    if not upstream or parse_header(header).get("Upstream"):
        return header
    lines = header.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.strip() == "---"), len(lines))
    return "".join([*lines[:at], f"Upstream: {upstream}\n", *lines[at:]])


def _with_other_pins(project: Project, mine: Mapping[str, Patch], order: list[str]) -> list[str]:
    """The series to write: the edited pin's patches (`order`) in the slots its patches had,
    the other pins' patches where they were (the work tree holds that pin's release only)."""
    out: list[str] = []
    new = list(order)
    for entry in project.series:
        if entry.filename not in mine:
            out.append(entry.filename)
        elif new:
            out.append(new.pop(0))
    return out + new


def _sync_messages(scratch: GitRepo, base: str, commits: list[Final]) -> list[tuple[str, str]]:
    """Make each commit's message its patch file's header plus the trailer (trees and authors kept), so the
    next refresh compares like with like."""
    parent = base
    rewriting = False
    out: list[tuple[str, str]] = []
    for info, name, header in commits:
        wanted = to_message(header, name) if name is not None and header is not None else info.message
        if rewriting or wanted != info.message:
            rewriting = True
            sha = commit_raw(scratch, info.tree, [parent], wanted, env=info.author_env())
        else:
            sha = info.sha
        if name is not None:
            out.append((name, sha))
        parent = sha
    if rewriting:
        scratch.run("update-ref", "-m", "imgbuild patches refresh", "HEAD", parent)
    return out


def _ensure_nl(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"
