"""Rendering of `patches check --onto`: the variant x ref x patch matrix as a rich table."""

from __future__ import annotations

from rich.table import Table

from imgbuild.workflows.matrix import Matrix


def matrix_table(m: Matrix) -> Table:
    table = Table(title=f"variant x ref x patch ({m.upstream})")
    table.add_column("variant")
    table.add_column("patch")
    for r in m.refs:
        table.add_column(r.tag if r.tag == r.ref else f"{r.ref} ({r.tag})")
    style = {"exact": "green", "offset": "yellow", "3way": "yellow", "conflict": "bold red"}
    look = {"PASS": "green", "CHANGES": "yellow", "FAIL": "bold red"}
    for stack, names in m.stacks:
        table.add_row(
            f"[bold]{stack}[/]",
            f"({len(names)} patches)",
            *[f"[{look[m.verdict(stack, r.ref)]}]{m.verdict(stack, r.ref)}[/]" for r in m.refs],
        )
        for n in names:
            cells = [
                "[dim](stays on its pin)[/]" if c is None else f"[{style.get(c.outcome, 'cyan')}]{m.label(c)}[/]"
                for c in (m.cell(stack, r.ref, n) for r in m.refs)
            ]
            table.add_row("", n, *cells)
    return table
