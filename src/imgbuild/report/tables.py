"""Rendering of reports: rich tables for people, JSON for CI."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from imgbuild.patches.apply import PatchOutcome
    from imgbuild.patches.patchfile import Patch
    from imgbuild.patches.variants import VariantPlan
    from imgbuild.report.documents import Printed

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
if not console.is_terminal:
    console.width = 160  # logs and pipes: do not squeeze tables into 80 columns
err_console = Console(stderr=True)


def print_json(doc: Printed) -> None:
    """Print a `--json` document (report/documents/): `{"schema": "imgbuild.<name>/<N>", ...}`."""
    sys.stdout.write(doc.render() + "\n")


def _m(method: str) -> str:
    style = METHOD_STYLE.get(method, "")
    return f"[{style}]{method}[/]" if style else method


def short_name(path: str, all_paths: Sequence[str]) -> str:
    """The file name, or more of the path when two files share a name."""
    return short_names(all_paths)[path] if path in all_paths else "/".join(path.split("/")[-2:])


def short_names(all_paths: Sequence[str]) -> dict[str, str]:
    """short_name of every path at once (one pass; a series of hundreds of patches stays linear)."""
    bases = Counter(p.rsplit("/", 1)[-1] for p in all_paths)
    return {
        p: p.rsplit("/", 1)[-1] if bases[p.rsplit("/", 1)[-1]] == 1 else "/".join(p.split("/")[-2:]) for p in all_paths
    }


def patches_table(patches: Sequence[Patch]) -> Table:
    table = Table(title="patches/series")
    for col in ("#", "patch", "group", "files", "description"):
        table.add_column(col)
    for i, p in enumerate(patches, start=1):
        table.add_row(str(i), p.name, p.group or "-", "\n".join(p.paths), p.description)
    return table


def outcomes_table(title: str, outcomes: Sequence[PatchOutcome]) -> Table:
    """One row per hunk: where it landed and how. Patch and file show once."""
    table = Table(title=title)
    for col in ("patch", "group", "result", "file", "hunk", "method", "offset", "line", "note"):
        table.add_column(col, justify="right" if col in ("hunk", "offset", "line") else "left")
    names = short_names([f.path for o in outcomes for f in o.files])
    for o in outcomes:
        rows: list[tuple[str, ...]] = []
        for f in o.files:
            name = names[f.path]
            if not f.hunks:
                rows.append((name, "-", _m(f.method), "", "", f.reason))
            for h in f.hunks:
                offset = f"{h.offset:+d}" if h.method not in ("failed", "upstreamed") else ""
                note = f.reason if h.hunk == len(f.hunks) else ""
                rows.append((name if h.hunk == 1 else "", f"#{h.hunk}", _m(h.method), offset, str(h.line or ""), note))
        for i, row in enumerate(rows):
            table.add_row(*((o.patch, o.group, _m(o.method)) if i == 0 else ("", "", "")), *row)
    return table


def image_label(plan: VariantPlan) -> str:
    repo, tags = plan.variant.image.repository, plan.variant.image.tags
    return f"{repo}:{tags[0]}" if repo and tags else plan.variant.name


def plan_matrix(plans: Sequence[VariantPlan]) -> Table:
    """Files down, images across: stays readable however many files there are."""
    ordered = sorted(plans, key=lambda p: (len(p.variant.chain), p.variant.name))
    paths = list(dict.fromkeys(f.path for plan in ordered for f in plan.files))
    table = Table(title="image x file")
    table.add_column("file")
    table.add_column("group")
    for plan in ordered:
        table.add_column(image_label(plan))
    states = [{f.path: f for f in plan.files} for plan in ordered]
    for path in paths:
        groups = next((f.groups for st in states if (f := st.get(path))), ())
        cells = []
        for st in states:
            f = st.get(path)
            cells.append("absent" if f is None else ("[green]patched[/]" if f.state == "patched" else "original"))
        table.add_row(short_name(path, paths), ",".join(groups), *cells)
    return table
