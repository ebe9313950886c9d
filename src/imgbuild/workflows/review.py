"""The review report of a rebase: per patch, the outcome and why, files that
moved, hunks dropped as upstreamed (with the checks that proved it), and a
range-diff of the patch before and after. Markdown for people, JSON for tools.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imgbuild.workflows.workspace import work_root

if TYPE_CHECKING:
    from imgbuild.workflows.rebase_state import RebaseState, Row

SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def report_paths(root: Path, state: RebaseState) -> tuple[Path, Path]:
    if state.report:
        md = Path(state.report)
        return md, md.with_suffix(".json")
    name = f"rebase-{SAFE.sub('_', state.old.tag)}-to-{SAFE.sub('_', state.onto.tag)}"
    base = work_root(root) / "reports"
    return base / f"{name}.md", base / f"{name}.json"


def _fence(text: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}diff\n{text.rstrip()}\n{ticks}\n"


def render_report(state: RebaseState, typed_rows: Sequence[Row], warnings: Sequence[str]) -> tuple[str, dict[str, Any]]:
    old, onto = state.old.to_json(), state.onto.to_json()
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
    for r in rows:
        notes = []
        notes += [f"`{m['old']}` → `{m['new']}` ({m['how']})" for m in r.get("moves", [])]
        if r.get("dropped_hunks"):
            notes.append(f"{len(r['dropped_hunks'])} hunk(s) already upstream")
        if r.get("reason"):
            notes.append(r["reason"].replace("|", "\\|").replace("\n", " "))
        lines.append(f"| `{r['filename']}` | {r['outcome']} | {r['file']} | {'; '.join(notes)} |")
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    for r in rows:
        lines += ["", f"## `{r['filename']}`: {r['outcome']}", ""]
        if r.get("reason"):
            lines += [f"Why: {r['reason']}", ""]
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
            lines += ["", "Range-diff (old patch → new patch):", "", _fence(r["range_diff"])]
    md = "\n".join(lines).rstrip() + "\n"
    data = {
        "old": old,
        "onto": onto,
        "today": state.today,
        "patches": rows,
        "warnings": list(warnings),
    }
    return md, data
