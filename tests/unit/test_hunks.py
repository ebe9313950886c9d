from __future__ import annotations

from imgbuild.patches.hunks import apply_hunks, split_lines
from imgbuild.patches.patchfile import Hunk


def hunk(old_start: int, old: list[str], new: list[str], lead: int = 1, trail: int = 1, index: int = 1) -> Hunk:
    return Hunk(index, "@@", old_start, old_start, tuple(old), tuple(new), lead, trail, 1)


LINES = [f"l{i}\n" for i in range(1, 21)]


def test_split_lines_keeps_form_feeds_inside_lines() -> None:
    assert split_lines("a\x0cb\nc") == ["a\x0cb\n", "c"]
    assert split_lines("a\n") == ["a\n"]


def test_split_lines_is_a_split_on_newlines_only() -> None:
    # every line boundary str.splitlines knows, inside, at the ends and next to '\n'
    others = ["\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
    for other in others:
        for text in (f"a{other}b\nc", f"a\n{other}", f"{other}a\n", other, f"a{other}", f"\n{other}\n", f"a\n{other}b"):
            parts = text.split("\n")
            assert split_lines(text) == [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else []), text
    assert split_lines("") == [] and split_lines("\n\n") == ["\n", "\n"] and split_lines("a\nb") == ["a\n", "b"]


def test_exact() -> None:
    h = hunk(5, ["l5\n", "l6\n", "l7\n"], ["l5\n", "NEW\n", "l7\n"])
    res = apply_hunks(LINES, [h])
    assert res.lines is not None and res.lines[5] == "NEW\n"
    assert [(o.method, o.offset, o.line) for o in res.hunks] == [("exact", 0, 5)]


def test_offset_reports_distance_and_target_line() -> None:
    h = hunk(2, ["l5\n", "l6\n", "l7\n"], ["l5\n", "NEW\n", "l7\n"])
    res = apply_hunks(LINES, [h])
    assert [(o.method, o.offset, o.line) for o in res.hunks] == [("offset", 3, 5)]


def test_offset_carries_to_later_hunks() -> None:
    h1 = hunk(2, ["l5\n", "l6\n", "l7\n"], ["l5\n", "X\n", "l7\n"], index=1)
    h2 = hunk(12, ["l15\n", "l16\n", "l17\n"], ["l15\n", "Y\n", "l17\n"], index=2)
    res = apply_hunks(LINES, [h1, h2])
    assert [(o.method, o.offset, o.line) for o in res.hunks] == [("offset", 3, 5), ("offset", 3, 15)]
    assert res.lines is not None and "X\n" in res.lines and "Y\n" in res.lines


def test_fuzz_refused_by_default_and_allowed_explicitly() -> None:
    h = hunk(5, ["CHANGED\n", "l6\n", "l7\n"], ["CHANGED\n", "NEW\n", "l7\n"])
    assert apply_hunks(LINES, [h]).hunks[0].method == "failed"
    res = apply_hunks(LINES, [h], max_fuzz=1)
    assert res.hunks[0].method == "fuzz" and res.hunks[0].fuzz == 1
    assert res.lines is not None and res.lines[5] == "NEW\n"


def test_already_applied_hunk_is_upstreamed() -> None:
    patched = [*LINES[:5], "NEW\n", *LINES[5:]]
    h = hunk(5, ["l5\n", "l6\n"], ["l5\n", "NEW\n", "l6\n"])
    res = apply_hunks(patched, [h])
    assert res.hunks[0].method == "upstreamed"
    assert res.lines == patched


def test_missing_context_fails() -> None:
    h = hunk(5, ["nope\n", "l6\n"], ["nope\n", "x\n", "l6\n"])
    res = apply_hunks(LINES, [h])
    assert res.lines is None and any(h.method == "failed" for h in res.hunks)


def test_hunks_never_overlap() -> None:
    # Two hunks wanting the same lines: the second must not reuse the first's.
    h1 = hunk(1, ["l1\n", "l2\n"], ["l1\n", "A\n", "l2\n"], index=1)
    h2 = hunk(1, ["l1\n", "l2\n"], ["l1\n", "B\n", "l2\n"], index=2)
    res = apply_hunks(LINES, [h1, h2])
    assert res.hunks[1].method == "failed"
