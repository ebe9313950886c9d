"""Carry one patch onto another release (`rebase`, `check --onto`): follow moved files, apply exact, offset or
3-way (never fuzz), and classify; a hunk is upstreamed only when three independent checks agree, else a conflict."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import ConfigDict, Field, PlainSerializer

from imgbuild.errors import ImgbuildError
from imgbuild.patches.apply import Blobs, FileOutcome, PatchOutcome, Tree, apply_patch, combined
from imgbuild.patches.hunks import apply_hunks, decode, encode, split_lines
from imgbuild.patches.patchfile import HUNK_RE, FileDiff, Hunk, Patch, hunk_body
from imgbuild.patches.renames import FileMove, RenameFinder, rewrite
from imgbuild.shapes import omitted_unless_set
from imgbuild.upstream.git import GitError, diff_no_index, merge_file, patch_id

CARRIED = frozenset({"exact", "offset", "3way", "partly-upstreamed"})
MARKERS = ("<<<<<<< ", ">>>>>>> ")


@dataclass(frozen=True)
class Verification:
    """The three checks behind calling hunks upstreamed."""

    # its documents' description (the schema's words, kept as they were)
    __pydantic_config__ = ConfigDict(
        json_schema_extra={
            "description": "Why a patch is called upstreamed: its hunks reverse-apply, or their added lines are "
            "present, or its patch-id matches."
        }
    )

    path: str
    hunks: tuple[int, ...]
    reverse_apply: bool
    added_lines_present: bool
    patch_id: bool | None  # None: not checked (no hunks, e.g. a created file that already exists)
    note: str = ""

    def failed(self) -> str:
        """The names of the checks that failed ('' when the hunks are upstreamed)."""
        checks = (
            ("reverse-apply", self.reverse_apply),
            ("added lines present", self.added_lines_present),
            ("patch-id", self.patch_id is not False),
        )
        return ", ".join(name for name, passed in checks if not passed)


@dataclass(frozen=True)
class DroppedHunk:
    path: str
    hunk: int
    header: str
    line: Annotated[int, Field(description="where the release already has it")]


@dataclass(frozen=True)
class Carry:
    patch: Patch  # as applied: paths rewritten to where the files are now
    outcome: str  # exact | offset | 3way | partly-upstreamed | upstreamed | conflict
    files: tuple[FileOutcome, ...]
    moves: tuple[FileMove, ...]
    changes: Mapping[str, bytes | None]  # this patch's own changes (clean part only, on conflict)
    conflicts: Mapping[str, bytes] = field(default_factory=dict)  # files with conflict markers
    dropped: tuple[DroppedHunk, ...] = ()
    checks: tuple[Verification, ...] = ()
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome != "conflict"

    @property
    def carried(self) -> bool:
        return self.outcome in CARRIED

    def shown(self) -> Carried:
        """The patch carried, as `patches check --onto --json` and the rebase's records print it."""
        return Carried(
            patch=self.patch.name,
            group=self.patch.group,
            method=self.outcome,
            files=self.files,
            filename=self.patch.filename,
            reason=self.reason,
            moves=list(self.moves),
            dropped_hunks=list(self.dropped),
            upstreamed_checks=list(self.checks),
            conflicts=sorted(self.conflicts),
        )


@dataclass(frozen=True, kw_only=True)
class Carried(PatchOutcome):
    """One patch carried onto a ref in memory."""

    reason: str
    moves: list[FileMove]
    dropped_hunks: list[DroppedHunk]
    upstreamed_checks: list[Verification]
    conflicts: Annotated[list[str], Field(description="the files left with conflict markers")]
    backport: Annotated[bool | None, omitted_unless_set("only for a backport (DEP-3 `Origin: backport`)")] = None
    # a backport's: the ref that has it, "" (printed null) when it has not; None (left out) for any other patch
    applied_upstream: Annotated[
        str | None,
        PlainSerializer(lambda v: v or None, return_type=str | None),
        omitted_unless_set("only for a backport: the ref that has it"),
    ] = None


class MemoTree:
    """A Tree that remembers what it read: stacks that share files read each once."""

    def __init__(self, tree: Tree) -> None:
        self.read = functools.cache(tree.read)
        self.blob = tree.blob
        self.symlink_prefix = functools.cache(tree.symlink_prefix)


# -- the original blobs: replay the series on the release it was written for --
@dataclass(frozen=True)
class OldStep:
    patch: Patch
    outcome: PatchOutcome
    own: dict[str, bytes | None]
    pre: dict[str, bytes]  # the patch's index-line old blob id -> the content it really applied to


def replay_series(patches: Sequence[Patch], tree: Tree) -> list[OldStep]:
    """Apply the series in order (exact or offset only) and remember each patch's pre-images."""
    changed: dict[str, bytes | None] = {}
    steps = []
    for patch in patches:
        pre: dict[str, bytes] = {}
        for fd in patch.files:
            if fd.old_path and fd.old_blob:
                data = changed[fd.old_path] if fd.old_path in changed else tree.read(fd.old_path)
                if data is not None:
                    pre[fd.old_blob] = data
        outcome, own, _ = apply_patch(patch, tree, changed, max_fuzz=0, merge3=None)
        if outcome.ok:
            changed.update(own)
        steps.append(OldStep(patch, outcome, own, pre))
    return steps


def lazy_blobs(patches: Sequence[Patch], tree: Callable[[], Tree]) -> Callable[[str, str], bytes | None]:
    """(patch name, blob id) -> that patch's original blob, from the series replayed on the pinned release
    (`tree`) on first use."""

    @functools.cache
    def by_patch() -> dict[str, dict[str, bytes]]:
        try:
            pinned = tree()
        except (ImgbuildError, GitError):  # no pinned release: 3-way merges use what the cache has
            return {}
        return {s.patch.name: s.pre for s in replay_series(patches, pinned)}

    return lambda name, sha: by_patch().get(name, {}).get(sha)


# -- raw patch text, for patch-ids of the hunks exactly as written -------------
def raw_sections(raw: str) -> list[list[str]]:
    """For each `diff --git` section of a patch text: the text of each of its hunks, exactly as written."""
    lines = raw.split("\n")
    sections: list[list[str]] = []
    i = 0
    while i < len(lines):
        m = HUNK_RE.match(lines[i]) if sections else None
        if m is None:
            if lines[i].startswith("diff --git "):
                sections.append([])
            i += 1
            continue
        end = hunk_body(lines, i + 1, (int(m.group(2) or 1), int(m.group(4) or 1)))[0]
        sections[-1].append("".join(f"{line}\n" for line in lines[i:end]))
        i = end
    return sections


def _canonical(path: str, hunks: Sequence[str]) -> str:
    body = "".join(h if h.endswith("\n") else h + "\n" for h in hunks)
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{body}"


def reverse(hunk: Hunk) -> Hunk:
    return dataclasses.replace(hunk, old=hunk.new, new=hunk.old, old_start=hunk.new_start, new_start=hunk.old_start)


def verify_upstreamed(
    path: str, hunks: Sequence[Hunk], current: bytes, raw_hunks: Sequence[str] | None
) -> Verification:
    """Reverse-apply, added-lines and patch-id checks for `hunks` being in `current` already."""
    lines = split_lines(decode(current))
    back = apply_hunks(lines, [reverse(h) for h in hunks], 0)
    reverse_ok = back.lines is not None and all(o.method in ("exact", "offset") for o in back.hunks)
    present = set(lines)
    added_ok = all(line in present for h in hunks for line in h.new[h.lead : len(h.new) - h.trail])
    pid: bool | None = None
    note = ""
    if reverse_ok and back.lines is not None and raw_hunks is not None:
        context = max((max(h.lead, h.trail) for h in hunks), default=3) or 3
        regenerated = raw_sections(diff_no_index(encode("".join(back.lines)), current, path, context=context))
        written = patch_id(_canonical(path, raw_hunks))
        found = patch_id(_canonical(path, regenerated[0] if regenerated else []))
        pid = written is not None and written == found
        if not pid:
            note = "the release has these lines, but not as the same change (patch-id differs)"
    return Verification(path, tuple(h.index for h in hunks), reverse_ok, added_ok, pid, note)


# -- the step itself ------------------------------------------------------------
def find_moves(patch: Patch, read: Callable[[str], bytes | None], finder: RenameFinder) -> dict[str, FileMove]:
    """Paths of `patch` that are gone from the tree but moved in the release."""
    moves: dict[str, FileMove] = {}
    for fd in patch.files:
        if fd.old_path is not None and fd.old_path not in moves and read(fd.old_path) is None:
            m = finder.follow(fd.old_path)
            if m is not None and read(m.new) is not None:
                moves[fd.old_path] = m
        target = fd.new_path
        if target is not None and target != fd.old_path and target not in moves and read(target) is None:
            m = finder.follow_created(target)
            if m is not None:
                moves[target] = m
    return moves


def carry_patch(
    patch: Patch,
    tree: Tree,
    changed: Mapping[str, bytes | None],
    *,
    finder: RenameFinder,
    raw: str,
    blobs: Blobs,
    label: str,
) -> Carry:
    """Apply `patch` (`raw`: its file's text) on `tree` overlaid with `changed`, and classify the result."""

    def read(path: str) -> bytes | None:
        return changed[path] if path in changed else tree.read(path)

    moves = find_moves(patch, read, finder)
    moved = rewrite(patch, moves)

    def merge3(ours: bytes, base: bytes, theirs: bytes) -> tuple[bytes, int]:
        return merge_file(ours, base, theirs, (label, "original", patch.filename))

    outcome, own, marked = apply_patch(moved, tree, changed, merge3=merge3, blobs=blobs)
    files = list(outcome.files)
    sections = raw_sections(raw)
    checks: list[Verification] = []
    dropped: list[DroppedHunk] = []
    for i, (fd, fo) in enumerate(zip(moved.files, files, strict=True)):
        if fo.method == "conflict" and fd.new_path is None and fd.old_path and read(fd.old_path) is None:
            files[i] = fo = dataclasses.replace(fo, method="upstreamed", reason="the release already deleted the file")
        if fo.method in ("conflict", "3way"):
            continue
        chosen = _upstreamed_hunks(fd, fo)
        if chosen is None:
            continue
        if not chosen or fd.old_path is None or fd.new_path is None:
            checks.append(Verification(fd.path, (), True, True, None, fo.reason))
            dropped.extend(DroppedHunk(fd.path, h.index, h.header, 0) for h in fd.hunks)
            continue
        current = read(fd.old_path) or b""
        raw_hunks = None
        if i < len(sections) and len(sections[i]) == len(fd.hunks):
            raw_hunks = [sections[i][h.index - 1] for h in chosen]
        checks.append(verify_upstreamed(fd.path, chosen, current, raw_hunks))
        lines = {o.hunk: o.line for o in fo.hunks}
        dropped.extend(DroppedHunk(fd.path, h.index, h.header, lines.get(h.index, 0)) for h in chosen)
    method = combined([f.method for f in files])
    reason = "; ".join(f"{f.path}: {f.reason}" for f in files if f.method == "conflict" and f.reason)
    bad = [c for c in checks if c.failed()]
    if bad and method != "conflict":
        method = "conflict"
        reason = "; ".join(
            f"{c.path}: hunks {', '.join(map(str, c.hunks))} look upstreamed, but {c.failed()} failed" for c in bad
        )
    return Carry(
        patch=moved,
        outcome=method,
        files=tuple(files),
        moves=tuple(moves.values()),
        changes=own,
        conflicts=marked if method == "conflict" else {},
        dropped=tuple(dropped) if method != "conflict" else (),
        checks=tuple(checks),
        reason=reason,
    )


def _upstreamed_hunks(fd: FileDiff, fo: FileOutcome) -> list[Hunk] | None:
    """The hunks of `fd` the release already has (None: none of them)."""
    if fo.method == "upstreamed" and not any(h.method == "upstreamed" for h in fo.hunks):
        return list(fd.hunks) if fd.old_path is not None and fd.new_path is not None else []
    if fo.method not in ("upstreamed", "partly-upstreamed"):
        return None
    marked = {o.hunk for o in fo.hunks if o.method == "upstreamed"}
    return [h for h in fd.hunks if h.index in marked]


def conflict_marker_lines(data: bytes) -> list[int]:
    """1-based lines that still hold conflict markers."""
    return [i for i, line in enumerate(decode(data).split("\n"), start=1) if line.startswith(MARKERS)]
