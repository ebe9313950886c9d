"""Apply the hunks of one file diff to one file's lines, in memory: at the exact position, then the nearest offset,
then (only when allowed) with fuzz. A hunk whose new side is already there is `upstreamed`; anything else `failed`."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from imgbuild.patches.patchfile import Hunk
from imgbuild.shapes import NULLABLE, hidden, named


def decode(data: bytes) -> str:
    """File and patch bytes as text: UTF-8, with any other byte kept (surrogateescape), so encode() gives it back."""
    return data.decode("utf-8", errors="surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def split_lines(text: str) -> list[str]:
    """Split on '\\n' only, keeping it (str.splitlines also splits on form feeds); io's newline="\\n" does that."""
    return list(io.StringIO(text, newline="\n"))


@named("Hunk")
@dataclass(frozen=True)
class HunkOutcome:
    hunk: int
    header: str
    method: str  # exact | offset | fuzz | upstreamed | failed
    offset: int = 0  # landed line minus the line the hunk names
    line: Annotated[int, NULLABLE] = 0  # 1-based line in the pre-image where it landed (0: nowhere)
    fuzz: Annotated[int, hidden()] = 0


@dataclass(frozen=True)
class FileApply:
    lines: list[str] | None  # None when any hunk failed
    hunks: list[HunkOutcome]


def _matches(lines: Sequence[str], block: Sequence[str], at: int) -> bool:
    n = len(block)
    return at >= 0 and at + n <= len(lines) and list(lines[at : at + n]) == list(block)


def _search(lines: Sequence[str], block: Sequence[str], expected: int, lowest: int) -> int | None:
    """Start index of `block` nearest to `expected`, not before `lowest`."""
    if not block:
        return max(lowest, min(expected, len(lines)))
    last = len(lines) - len(block)
    for dist in range(0, max(last, expected) + 1):
        for at in (expected + dist, expected - dist) if dist else (expected,):
            if lowest <= at <= last and _matches(lines, block, at):
                return at
    return None


def apply_hunks(lines: Sequence[str], hunks: Sequence[Hunk], max_fuzz: int = 0) -> FileApply:
    outcomes: list[HunkOutcome] = []
    edits: list[tuple[int, int, tuple[str, ...]]] = []  # (start, old length, new lines)
    lowest = 0
    carry = 0
    for hunk in hunks:
        expected = (hunk.old_start if not hunk.old else hunk.old_start - 1) + carry  # no old lines: insert after
        old, new, fuzz = hunk.old, hunk.new, 0
        at = _search(lines, old, expected, lowest)
        if at is not None and at != expected and _matches(lines, hunk.new, expected) and hunk.old != hunk.new:
            at = None  # the new side sits exactly where the hunk points: already applied
        cut_lead = 0
        while at is None and fuzz < max_fuzz:
            fuzz += 1
            cut_lead, cut_trail = min(fuzz, hunk.lead), min(fuzz, hunk.trail)
            if cut_lead + cut_trail == 0:
                continue
            old = hunk.old[cut_lead : len(hunk.old) - cut_trail]
            new = hunk.new[cut_lead : len(hunk.new) - cut_trail]
            at = _search(lines, old, expected + cut_lead, lowest)
        if at is None:
            done = _search(lines, hunk.new, expected, 0) if hunk.new and hunk.old != hunk.new else None
            method = "upstreamed" if done is not None else "failed"
            line = done + 1 if done is not None else 0
            outcomes.append(HunkOutcome(hunk.index, hunk.header, method, 0, line))
            continue
        landed = at - cut_lead
        step = landed - expected  # movement relative to where earlier hunks put us
        total = step + carry  # movement relative to the line the hunk names
        method = "fuzz" if fuzz else ("exact" if total == 0 else "offset")
        outcomes.append(HunkOutcome(hunk.index, hunk.header, method, total, landed + 1, fuzz))
        carry = total
        edits.append((at, len(old), tuple(new)))
        lowest = at + len(old)
    if any(o.method == "failed" for o in outcomes):
        return FileApply(None, outcomes)
    result: list[str] = []
    cursor = 0
    for start, length, new_lines in edits:
        result.extend(lines[cursor:start])
        result.extend(new_lines)
        cursor = start + length
    result.extend(lines[cursor:])
    return FileApply(result, outcomes)
