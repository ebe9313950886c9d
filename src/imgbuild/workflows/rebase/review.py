"""The review report of a rebase (Markdown and JSON): per patch the outcome and why, moved files,
hunks dropped as upstreamed, range-diffs; and the bump's additions: each patch's one word, the
per-hunk report of a conflict, the images built."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from imgbuild.patches.hunks import decode, split_lines
from imgbuild.patches.patchfile import parse_header
from imgbuild.shapes import dump
from imgbuild.workflows.workspace import work_root

if TYPE_CHECKING:
    from imgbuild.patches.patchfile import Patch
    from imgbuild.workflows.rebase.state import RebaseState, Row, Stopped

SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def report_md(root: Path, name: str, directory: Path | None = None) -> Path:
    """Where a review report goes by default (`.imgbuild-work/reports/NAME.md`; its JSON is beside it)."""
    return (directory or work_root(root) / "reports") / f"{SAFE.sub('_', name)}.md"


def report_paths(root: Path, state: RebaseState) -> tuple[Path, Path]:
    md = Path(state.report) if state.report else report_md(root, f"rebase-{state.old.tag}-to-{state.onto.tag}")
    return md, md.with_suffix(".json")


def _fenced(title: str, lines: Sequence[str], lang: str = "text") -> list[str]:
    """`title`, a blank line, and `lines` in a code fence longer than any run of backticks in them."""
    text = "\n".join(lines)
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return [title, "", f"{ticks}{lang}\n{text.rstrip()}\n{ticks}\n"]


def _shown(row: Mapping[str, Any]) -> str:
    """The outcome in the Markdown table: a patch resolved by hand whose new header says what upstream took is
    `resolved (partly-upstreamed)` (the JSON keeps `resolved`; its `kind` is `partly-upstreamed`)."""
    outcome = str(row.get("outcome", ""))
    partly = outcome == "resolved" and kind(outcome, (), row.get("header")) == "partly-upstreamed"
    return f"{outcome} (partly-upstreamed)" if partly else outcome


def render_report(state: RebaseState, typed_rows: Sequence[Row], warnings: Sequence[str]) -> tuple[str, dict[str, Any]]:
    old, onto = dump(state.old), dump(state.onto)
    rows = [r.to_report_json() for r in typed_rows]
    lines = [
        f"# Rebase of the patch series: {old['tag']} → {onto['tag']}",
        "",
        f"- old pin: `{old['tag']}` `{old['commit']}`",
        f"- new pin: `{onto['tag']}` `{onto['commit']}` (asked for `{state.ref}`)",
        f"- Last-Update of re-exported patches: {state.today}",
        "",
        "| patch | outcome | file | notes |",
        "|---|---|---|---|",
    ]
    shown = {r["filename"]: _shown(r) for r in rows}
    for r in rows:
        notes = []
        notes += [f"`{m['old']}` → `{m['new']}` ({m['how']})" for m in r.get("moves", [])]
        if r.get("dropped_hunks"):
            notes.append(f"{len(r['dropped_hunks'])} hunk(s) already upstream")
        if r.get("reason"):
            notes.append(r["reason"].replace("|", "\\|").replace("\n", " "))
        lines.append(f"| `{r['filename']}` | {shown[r['filename']]} | {r['file']} | {'; '.join(notes)} |")
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    for r in rows:
        lines += ["", f"## `{r['filename']}`: {shown[r['filename']]}", ""]
        if r.get("reason"):
            lines += [f"Why: {r['reason']}", ""]
        if _shown(r) != r["outcome"]:
            lines += [f"Applied upstream: {parse_header(r['header'])['Applied-Upstream'].strip()}", ""]
        for m in r.get("moves", []):
            lines.append(f"- followed a {m['how']} rename: `{m['old']}` → `{m['new']}`")
        for d in r.get("dropped_hunks", []):
            where = f" (release line {d['line']})" if d.get("line") else ""
            lines.append(f"- dropped hunk #{d['hunk']} of `{d['path']}`: `{d['header']}`{where}")
        for c in r.get("upstreamed_checks", []):
            pid = {True: "same", False: "differs", None: "n/a"}[c["patch_id"]]
            lines.append(
                f"- upstreamed check `{c['path']}`: reverse-apply {'ok' if c['reverse_apply'] else 'FAILED'}, "
                f"added lines {'present' if c['added_lines_present'] else 'MISSING'}, patch-id {pid}"
            )
        if r.get("range_diff"):
            lines += ["", *_fenced("Range-diff (old patch → new patch):", [r["range_diff"]], "diff")]
    md = "\n".join(lines).rstrip() + "\n"
    data = {
        "old": old,
        "onto": onto,
        "today": state.today,
        "patches": rows,
        "warnings": list(warnings),
    }
    return md, data


# -- the bump's additions: what each patch became, the per-hunk conflict report, the images --------
CONTEXT = 3  # lines of the release shown around where a conflicting hunk should land
# a row's outcome -> the bump's word for it, where they differ
KIND = {"exact": "carried", "3way": "3-way", "still upstreamed": "upstreamed", "conflict": "conflicting"}


def kind(outcome: str, moves: Sequence[object] = (), header: str | None = None) -> str:
    """carried | offset | 3-way | moved | partly-upstreamed | upstreamed | conflicting | resolved | skipped | ...:
    the one word the bump's report gives a patch (a carried patch whose files moved is `moved`; one resolved by
    hand whose new header says what upstream took, in DEP-3's `Applied-Upstream:`, is `partly-upstreamed`)."""
    word = KIND.get(outcome, "left out" if outcome.startswith("left in") else outcome)
    if word == "resolved" and header and parse_header(header).get("Applied-Upstream", "").strip():
        return "partly-upstreamed"
    return "moved" if moves and word in ("carried", "offset", "3-way") else word


def _lines(lines: Sequence[str]) -> list[str]:
    return [line.rstrip("\n") for line in lines]


def _locate(release: Sequence[str], expected: Sequence[str], near: int) -> tuple[int, int]:
    """Where `expected` fits `release` best: (0-based start, lines equal there); ties go nearest to `near`."""
    if not release or not expected:
        return min(max(near, 0), len(release)), 0

    def score(at: int) -> int:
        return sum(1 for j, line in enumerate(expected) if at + j < len(release) and release[at + j] == line)

    best = max(range(max(len(release) - len(expected), 0) + 1), key=lambda at: (score(at), -abs(at - near)))
    return best, score(best)


@dataclass(frozen=True)
class Block:
    """One conflict in a 3-way merged file: the release's side and the patch's, as the markers left them."""

    line: int  # 1-based line of `<<<<<<<` in the work tree's file
    ours: tuple[str, ...]
    theirs: tuple[str, ...]


def marker_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    side: list[str] | None = None
    ours: list[str] = []
    theirs: list[str] = []
    start = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("<<<<<<< "):
            ours, theirs, start = [], [], number
            side = ours
        elif side is not None and line.startswith("|||||||"):
            side = []  # a diff3 base section: the original, shown elsewhere (the patch's expected lines)
        elif side is not None and line == "=======":
            side = theirs
        elif side is not None and line.startswith(">>>>>>> "):
            blocks.append(Block(start, tuple(ours), tuple(theirs)))
            side = None
        elif side is not None:
            side.append(line)
    return blocks


@dataclass(frozen=True)
class Sides:
    expected: Annotated[list[str], Field(description="what the patch expects to find (context and removed lines)")]
    release: Annotated[list[str], Field(description="what the release has where the hunk should land")]
    patch: Annotated[list[str], Field(description="what the patch wants there")]


@dataclass(frozen=True)
class Markers:
    line: int  # 1-based line of `<<<<<<<` in the work tree's file
    ours: list[str]
    theirs: list[str]


@dataclass(frozen=True)
class Context:
    start: int  # 1-based line of the release where `lines` start
    lines: list[str]


@dataclass(frozen=True)
class ConflictHunk:
    """One hunk of the patch the rebase stopped at, where it should land on the release."""

    patch: str
    file: str
    original_file: str | None  # where the patch had the file, when the rebase followed a rename
    hunk: int
    header: str
    reason: str
    release_has_file: bool
    sides: Sides
    release_line: int | None
    lines_matching: int
    markers: Markers | None  # the conflict markers a 3-way merge left in the stop's work tree, if any
    context: Context


def conflict_hunks(
    stopped: Stopped,
    patch: Patch,
    read_release: Callable[[str], bytes | None],
) -> list[ConflictHunk]:
    """Per conflicting hunk of the patch the rebase stopped at: the file, the hunk (number and @@ header), the
    lines on each side (what the patch expects, what the release has there, what the patch wants), the
    conflict markers' ours/theirs when a 3-way merge left some (in the stop's work tree), and the release's
    code around the spot."""
    out: list[ConflictHunk] = []
    files = list(stopped.files)
    moved = {str(m.get("old")): str(m.get("new")) for m in stopped.moves}
    for index, fd in enumerate(patch.files):
        record = files[index] if index < len(files) else {}
        method = str(record.get("method", "conflict"))
        if method != "conflict":
            continue
        path = str(record.get("path") or moved.get(fd.path, fd.path))
        failed = {int(h["hunk"]) for h in record.get("hunks", ()) if h.get("method") == "failed"}
        hunks = [h for h in fd.hunks if h.index in failed] or list(fd.hunks)
        landed = {int(h["hunk"]): int(h.get("offset", 0)) for h in record.get("hunks", ()) if h.get("line")}
        data = read_release(path)
        release = split_lines(decode(data)) if data is not None else []
        work = Path(stopped.work_tree) / path
        blocks = marker_blocks(decode(work.read_bytes())) if work.is_file() else []
        for hunk in hunks:
            offset = max((o for i, o in landed.items() if i < hunk.index), default=0)
            near = (hunk.old_start - 1 if hunk.old else hunk.old_start) + offset
            at, equal = _locate(release, hunk.old, near)
            end = at + len(hunk.old)
            lo, hi = max(at - CONTEXT, 0), min(end + CONTEXT, len(release))
            wanted = set(_lines(hunk.new[hunk.lead : len(hunk.new) - hunk.trail]))
            dropped = set(_lines(hunk.old[hunk.lead : len(hunk.old) - hunk.trail]))
            block = next((b for b in blocks if wanted & set(b.theirs) or (not wanted and dropped & set(b.ours))), None)
            out.append(
                ConflictHunk(
                    patch=stopped.filename,
                    file=path,
                    original_file=fd.path if fd.path != path else None,
                    hunk=hunk.index,
                    header=hunk.header,
                    reason=str(record.get("reason") or stopped.reason),
                    release_has_file=data is not None,
                    sides=Sides(_lines(hunk.old), _lines(release[at:end]), _lines(hunk.new)),
                    release_line=at + 1 if data is not None else None,
                    lines_matching=equal,
                    markers=Markers(block.line, list(block.ours), list(block.theirs)) if block else None,
                    context=Context(lo + 1, _lines(release[lo:hi])),
                )
            )
    return out


def render_conflict(
    state: RebaseState, stopped: Stopped, hunks: Sequence[ConflictHunk], description: str
) -> tuple[str, dict[str, Any]]:
    """The review report of a rebase stopped at a conflict: the patches so far, then every conflicting hunk."""
    old, onto = dump(state.old), dump(state.onto)
    done = {r.filename: r for r in state.results}
    ahead = {str(p.get("filename")): dict(p) for p in stopped.pending}
    patches: list[dict[str, Any]] = []
    for item in state.items:
        res = done.get(item.filename)
        if res is not None:
            patches.append({**dump(res), "kind": kind(res.outcome, res.moves, res.header)})
        elif item.filename == stopped.filename:
            patches.append(
                {
                    "filename": item.filename,
                    "outcome": "conflict",
                    "kind": "conflicting",
                    "reason": stopped.reason,
                    "moves": [dict(m) for m in stopped.moves],
                }
            )
        else:
            row: dict[str, Any] = {"filename": item.filename, "outcome": "pending", "kind": "pending"}
            if item.filename in ahead:
                row["preview"] = ahead[item.filename]
            patches.append(row)
    commands = [
        f"cd {stopped.work_tree}  # resolve the conflict markers (by intent: docs/rebase-runbook.md)",
        "imgbuild patches rebase --continue",
        "imgbuild patches bump",
    ]
    lines = [
        f"# Rebase of the patch series: {old['tag']} → {onto['tag']}: stopped at a conflict",
        "",
        f"- old pin: `{old['tag']}` `{old['commit']}`",
        f"- new release: `{onto['tag']}` `{onto['commit']}`",
        f"- stopped at `{stopped.filename}`: {stopped.reason}",
        f"- work tree: `{stopped.work_tree}`",
        "",
        "| patch | outcome | if carried now (as `patches check --onto` carries it) |",
        "|---|---|---|",
    ]
    lines += [f"| `{p['filename']}` | {p['kind']} | {_cell(p.get('preview'))} |" for p in patches]
    if ahead:
        lines += ["", "## Still to carry", ""]
        lines.append(
            "Each pending patch carried now, in memory, onto the new release with the patches before it "
            "(the stopped one left out), as `imgbuild patches check --onto` carries it:"
        )
        lines.append("")
        for p in ahead.values():
            lines.append(f"- `{p['filename']}`: {p['summary']}")
            for h in p.get("conflicting_hunks", ()):
                heads = ", ".join(f"#{n} `{hd}`" for n, hd in zip(h["hunks"], h["headers"], strict=False))
                lines.append(f"  - `{h['file']}`: {heads}")
    if description:
        lines += ["", f"## What `{stopped.filename}` is for (its DEP-3 Description)", "", _quote(description)]
    lines += ["", "## Conflicting hunks"]
    for h in hunks:
        where = f" (was `{h.original_file}`)" if h.original_file else ""
        lines += ["", f"### `{h.file}`{where}, hunk #{h.hunk} `{h.header}`", ""]
        if not h.release_has_file:
            lines += [f"The release has no `{h.file}`: {h.reason}", ""]
        lines += _fenced("The patch expects:", h.sides.expected)
        lines += _fenced(f"The release has (line {h.release_line}):", h.sides.release)
        lines += _fenced("The patch wants:", h.sides.patch)
        if m := h.markers:
            ours = f"Conflict markers at line {m.line} of the work tree's file: ours (the release):"
            lines += [*_fenced(ours, m.ours), *_fenced("theirs (the patch):", m.theirs)]
        ctx = h.context
        lines += _fenced(f"The release around it (from line {ctx.start}):", ctx.lines)
    lines += ["", *_fenced("## To resume", commands, "sh")]
    lines.append("Never drop a patch silently: `imgbuild patches rebase --skip` only with the reason recorded.")
    md = "\n".join(lines).rstrip() + "\n"
    data = {
        "old": old,
        "onto": onto,
        "today": state.today,
        "status": "conflict",
        "patches": patches,
        "stopped": dump(stopped),
        "pending": list(ahead.values()),
        "conflicts": [dump(h) for h in hunks],
        "resume": commands,
        "warnings": [],
    }
    return md, data


def _cell(preview: Mapping[str, Any] | None) -> str:
    if not preview:
        return ""
    return str(preview.get("summary", "")).replace("|", "\\|")


def with_kinds(patches: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The report's patch rows, each with its one word (`kind`)."""
    return [
        {**p, "kind": p.get("kind") or kind(str(p.get("outcome", "")), p.get("moves") or (), p.get("header"))}
        for p in patches
    ]


def tally(patches: Sequence[Mapping[str, Any]]) -> str:
    """`2 carried, 1 upstreamed`: how many patches got each word."""
    counts = Counter(p["kind"] for p in with_kinds(patches))
    return ", ".join(f"{n} {w}" for w, n in counts.items())


def render_bump(md: str, data: Mapping[str, Any], bump: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The review report with the bump's part: the one line, the branch and commit, each patch's word, the images."""
    head = [f"**{bump['message']}**", ""]
    if bump.get("branch"):
        head.append(f"- branch: `{bump['branch']}`" + (f" at `{bump['commit']}`" if bump.get("commit") else ""))
    rows = with_kinds(data.get("patches", ()))
    if rows:
        head.append("- patches: " + tally(rows))
    for p in bump.get("pins") or ():  # the pins that move with it (what the new release requires of them)
        head.append(f"- pin moved with it: {p['message']}")
    tail: list[str] = []
    images = bump.get("images") or []
    if images:
        tail += [
            "",
            "## Images (built and smoke-tested)",
            "",
            "| variant | platform | image id | tag | smoke |",
            "|---|---|---|---|---|",
        ]
        for i in images:
            tail.append(f"| {i['variant']} | {i['platform']} | `{i['image_id']}` | `{i['immutable']}` | {i['smoke']} |")
    elif bump.get("build"):
        tail += ["", "## Images", "", str(bump["build"])]
    body = md.split("\n", 1)
    text = "\n".join([body[0], "", *head, body[1] if len(body) > 1 else ""]).rstrip() + "\n"
    if tail:
        text += "\n".join(tail).rstrip() + "\n"
    return text, {**data, "patches": rows, "bump": dict(bump)}


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.rstrip().splitlines())
