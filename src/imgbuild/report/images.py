"""Rendering of build and smoke results: rich tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from imgbuild.report.tables import short_name
from imgbuild.smoke.report import FileState, SmokeReport

if TYPE_CHECKING:
    from imgbuild.smoke.supply import SupplyChain

STATUS = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]skip[/]"}


def _cell(row: FileState) -> str:
    if row.ok:
        return "[green]patched[/]" if row.actual == "patched" else row.actual
    return f"[bold red]{row.actual}[/] (want {row.expected})"


def file_matrix(rows: Sequence[tuple[str, Sequence[FileState]]]) -> Table:
    """One row per image, one column per file, like section 3 of the deployment report."""
    paths = list(dict.fromkeys(r.path for _, files in rows for r in files))
    table = Table(title="image x file (read from the image)")
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


def supply_chain_lines(chain: SupplyChain) -> list[str]:
    """`smoke --key`: the signature and the SBOM, verified or not, then where the SBOM disagrees with the image."""
    lines = []
    for what, v in (("signature", chain.signature), ("sbom", chain.sbom)):
        mark = "[green]verified[/]" if v.ok else "[bold red]missing or not verified[/]"
        lines.append(f"{what:16} {mark}: {escape(v.detail)}")
    return lines + [f"[bold red]disagree[/]: {escape(problem)}" for problem in chain.problems]
