"""The carry preview of a stopped rebase: every patch still pending, carried in memory onto the new release on top
of what the rebase has carried so far, as `patches check --onto` carries it (carry_patch, then the backport check;
never fuzz), so a patch author sees the size of the job at the first stop. Nothing is written."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from imgbuild.patches.carry import Carry, MemoTree, carry_patch
from imgbuild.patches.hunks import decode
from imgbuild.patches.patchfile import parse_bytes
from imgbuild.patches.renames import RenameFinder
from imgbuild.shapes import named
from imgbuild.upstream.git import CommitTree, GitRepo
from imgbuild.workflows import backport_check
from imgbuild.workflows.rebase.state import Item

# carry outcome -> the word the reports use (review.kind's words)
WORD = {"exact": "exact", "offset": "offset", "3way": "3-way", "conflict": "conflicting"}


@dataclass(frozen=True)
class Pending:
    """One pending patch as it would carry now."""

    filename: str
    outcome: str  # exact | offset | 3way | partly-upstreamed | upstreamed | conflict
    reason: str
    conflicts: tuple[tuple[str, tuple[int, ...], tuple[str, ...]], ...]  # (file, hunk numbers, @@ headers)
    dormant: bool = False

    @property
    def word(self) -> str:
        return WORD.get(self.outcome, self.outcome)

    @property
    def summary(self) -> str:
        """`conflicting: vllm/x.py hunks #1, #3` or `exact`."""
        if not self.conflicts:
            return self.word
        where = "; ".join(f"{path} hunk(s) #{', #'.join(map(str, hunks))}" for path, hunks, _ in self.conflicts)
        return f"{self.word}: {where}"

    def shown(self) -> PendingShown:
        """The patch as a stop's preview prints it (`patches bump --json`, the stop's `pending`)."""
        hunks = [ConflictingHunks(path, list(hunks), list(headers)) for path, hunks, headers in self.conflicts]
        return PendingShown(self.filename, self.outcome, self.word, self.summary, self.reason, self.dormant, hunks)


@dataclass(frozen=True)
class ConflictingHunks:
    file: str
    hunks: list[int]
    headers: list[str]


@named("Pending")
@dataclass(frozen=True)
class PendingShown:
    """A patch not yet carried at a stop, carried in memory as `patches check --onto` does: will it apply, and
    which hunks conflict."""

    filename: str
    outcome: str
    kind: str
    summary: str
    reason: str
    dormant: bool
    conflicting_hunks: list[ConflictingHunks]


def conflicting_hunks(carry: Carry) -> tuple[tuple[str, tuple[int, ...], tuple[str, ...]], ...]:
    """Per file that conflicts: the hunks that failed (all of the file's when none is marked), with their headers."""
    out = []
    for fd, fo in zip(carry.patch.files, carry.files, strict=True):
        if fo.method != "conflict":
            continue
        failed = {h.hunk for h in fo.hunks if h.method == "failed"}
        hunks = [h for h in fd.hunks if h.index in failed] or list(fd.hunks)
        out.append((fo.path, tuple(h.index for h in hunks), tuple(h.header for h in hunks)))
    return tuple(out)


def preview(
    scratch: GitRepo,
    items: Sequence[Item],
    read: Callable[[Item], bytes],
    *,
    package_root: str,
    old: str,
    head: str,
    onto: str,
    tag: str,
) -> list[Pending]:
    """`items` (the patches after the stop, in order) carried onto `head` (the new release with what was carried
    so far): each applies on what the ones before it would leave; one that conflicts is left out for the next."""
    finder = RenameFinder(scratch, old, onto)
    tree = MemoTree(CommitTree(scratch, head))
    changed: dict[str, bytes | None] = {}
    out = []
    for item in items:
        raw = read(item)
        text = decode(raw)
        patch = parse_bytes(item.filename, raw, package_root)
        blobs = {sha: scratch.read_blob(blob) for sha, blob in item.blobs.items()}
        carry = carry_patch(patch, tree, changed, finder=finder, raw=text, blobs=blobs.get, label=f"upstream {tag}")
        carry = backport_check.recognise(carry, text, scratch, old, onto, tag)
        if carry.ok:
            changed.update(carry.changes)
        out.append(Pending(item.filename, carry.outcome, carry.reason, conflicting_hunks(carry), item.dormant))
    return out
