"""Rendering of build, smoke and inspect results: rich tables."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from imgbuild.report.tables import short_name
from imgbuild.smoke.checks import FileRow, SmokeReport

STATUS = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]skip[/]"}


def _cell(row: FileRow) -> str:
    if row.ok:
        return "[green]patched[/]" if row.actual == "patched" else row.actual
    return f"[bold red]{row.actual}[/] (want {row.expected})"


def file_matrix(
    rows: Sequence[tuple[str, Sequence[FileRow]]], title: str = "image x file (read from the image)"
) -> Table:
    """One row per image, one column per file, like section 3 of the deployment report."""
    paths = list(dict.fromkeys(r.path for _, files in rows for r in files))
    table = Table(title=title)
    table.add_column("image", no_wrap=True)
    for p in paths:
        table.add_column(short_name(p, paths))
    for name, files in rows:
        by_path = {r.path: r for r in files}
        table.add_row(name, *(_cell(by_path[p]) if p in by_path else "-" for p in paths))
    return table


def checks_table(report: SmokeReport) -> Table:
    table = Table(title=f"smoke {report.image} ({report.platform}, {report.image_id[7:19]})")
    for col in ("group", "check", "result", "detail"):
        table.add_column(col, overflow="fold")
    for c in report.checks:
        if c.group == "files":
            continue  # shown in the matrix
        table.add_row(c.group, c.name, STATUS.get(c.status, c.status), c.detail)
    files = [c for c in report.checks if c.group == "files"]
    bad = [c for c in files if c.status == "fail"]
    table.add_row(
        "files",
        f"{len(files)} planned files",
        STATUS["fail" if bad else "pass"],
        "; ".join(f"{c.name}: {c.detail}" for c in bad) or "every sha256 matches its state",
    )
    return table
