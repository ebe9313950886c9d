"""Rendering of `patches check --onto`: the variant x ref x patch matrix as a rich table and as Markdown."""

from __future__ import annotations

from rich.table import Table

from imgbuild.workflows.matrix import Matrix

MARK = {"exact": "✅", "offset": "✅", "3way": "⚠️", "partly-upstreamed": "⬆️", "upstreamed": "⬆️", "conflict": "❌"}


def matrix_markdown(m: Matrix) -> str:
    """The matrix for $GITHUB_STEP_SUMMARY or a PR comment."""
    refs = m.refs
    head = "| variant | patch | " + " | ".join(f"`{r.tag}`" for r in refs) + " |"
    rule = "|---|---|" + "---|" * len(refs)
    verdict = "all variants carry" if m.ok else m.summary
    lines = [
        f"## imgbuild patches check: {m.upstream}",
        "",
        f"**{'✅' if m.ok else '❌'} {verdict}** to "
        + ", ".join(f"`{r.tag}` (`{r.commit[:12]}`)" for r in refs)
        + (" (strict: exact or offset only)" if m.strict else ""),
        "",
        head,
        rule,
    ]
    for stack, names in m.stacks:
        cells = [f"**{m.verdict(stack, r.ref)}**" for r in refs]
        lines.append(f"| **{stack}** | ({len(names)} patches) | " + " | ".join(cells) + " |")
        for n in names:
            row = [
                "(stays on its pin)" if c is None else f"{MARK.get(c.outcome, '')} {m.label(c)}".strip()
                for c in (m.cell(stack, r.ref, n) for r in refs)
            ]
            lines.append(f"| {stack} | `{n}` | " + " | ".join(row) + " |")
    problems = [
        f"- {stack} on `{ref}`: `{name}`: {c.reason}"
        for (stack, ref, name), c in m.cells.items()
        if not m.passes(c) and c.reason
    ]
    if problems:
        lines += ["", "<details><summary>why</summary>", "", *sorted(set(problems)), "", "</details>"]
    return "\n".join(lines) + "\n"


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
