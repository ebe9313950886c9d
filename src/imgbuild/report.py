"""Rendering of reports: rich tables for people, JSON for CI."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from imgbuild.apply import PatchOutcome
from imgbuild.patchfile import Patch
from imgbuild.planner import VariantPlan

METHOD_STYLE = {
    "exact": "green",
    "offset": "yellow",
    "fuzz": "red",
    "3way": "yellow",
    "upstreamed": "cyan",
    "partly-upstreamed": "cyan",
    "conflict": "bold red",
    "failed": "bold red",
}

console = Console()
err_console = Console(stderr=True)


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def _m(method: str) -> str:
    style = METHOD_STYLE.get(method, "")
    return f"[{style}]{method}[/]" if style else method


def short_name(path: str, all_paths: Sequence[str]) -> str:
    """The file name, or more of the path when two files share a name."""
    base = path.rsplit("/", 1)[-1]
    if sum(1 for p in all_paths if p.rsplit("/", 1)[-1] == base) == 1:
        return base
    return "/".join(path.split("/")[-2:])


def patches_table(patches: Sequence[Patch]) -> Table:
    table = Table(title="patches/series")
    for col in ("#", "patch", "group", "files", "description"):
        table.add_column(col)
    for i, p in enumerate(patches, start=1):
        table.add_row(str(i), p.name, p.group or "-", "\n".join(p.paths), p.description)
    return table


def outcomes_table(title: str, outcomes: Sequence[PatchOutcome]) -> Table:
    table = Table(title=title)
    for col in ("patch", "group", "result", "file", "hunk", "method", "offset", "line"):
        table.add_column(col, justify="right" if col in ("offset", "line") else "left")
    for o in outcomes:
        first = True
        for f in o.files:
            rows = f.hunks or ()
            if not rows:
                table.add_row(
                    o.patch if first else "", o.group if first else "", _m(o.method) if first else "",
                    f.path, "-", _m(f.method), "", f.reason,
                )  # fmt: skip
                first = False
            for h in rows:
                table.add_row(
                    o.patch if first else "", o.group if first else "", _m(o.method) if first else "",
                    f.path if h.hunk == 1 else "", f"#{h.hunk} {h.header}", _m(h.method),
                    f"{h.offset:+d}" if h.method != "failed" else "", str(h.line or ""),
                )  # fmt: skip
                first = False
            if f.reason and rows:
                table.add_row("", "", "", "", "", "", "", f"[dim]{f.reason}[/]")
    return table


def plan_matrix(plans: Sequence[VariantPlan]) -> Table:
    paths = list(dict.fromkeys(f.path for plan in plans for f in plan.files))
    table = Table(title="variant x file")
    table.add_column("image")
    for path in paths:
        table.add_column(short_name(path, paths))
    for plan in plans:
        states = {f.path: f.state for f in plan.files}
        repo = plan.variant.image.repository
        label = f"{repo}:{plan.variant.image.tags[0]}" if repo and plan.variant.image.tags else plan.variant.name
        cells = [("[green]patched[/]" if states.get(p) == "patched" else states.get(p, "absent")) for p in paths]
        table.add_row(label, *cells)
    return table
