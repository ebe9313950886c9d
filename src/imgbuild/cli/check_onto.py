"""`imgbuild patches check --onto REF [REF...]`: forwards to checkmatrix.py."""

from __future__ import annotations

import os
from pathlib import Path

from imgbuild.errors import CheckFailed, UsageError


def split_refs(onto: list[str] | None, extra: list[str] | None) -> list[str]:
    """--onto A --onto B,C D E -> [A, B, C, D, E] (duplicates removed)."""
    if extra and not onto:
        raise UsageError(
            f"unexpected argument(s) {' '.join(extra)}", hint="refs to check go after --onto: --onto REF [REF...]"
        )
    refs = [r.strip() for item in [*(onto or []), *(extra or [])] for r in item.split(",") if r.strip()]
    return list(dict.fromkeys(refs))


def note_rebase(root: Path) -> None:
    """Say so on stderr when a rebase is in progress or was interrupted."""
    from imgbuild.report import tables
    from imgbuild.workflows.workspace import state_dir

    if not state_dir(root, "rebase").exists():  # no rebase state: nothing to say, and no rebase module to load
        return
    from imgbuild.workflows.rebase import in_progress_message

    busy = in_progress_message(root)
    if busy:
        tables.err_console.print(f"[yellow]note[/]: {busy}; `imgbuild patches rebase --continue` or `--abort`")


def run(refs: list[str], *, as_json: bool, markdown: Path | None, strict: bool, allow_fuzz: int) -> None:
    from imgbuild.project import load_project
    from imgbuild.report import tables
    from imgbuild.report.tables import print_json

    if allow_fuzz:
        raise UsageError("--allow-fuzz does not go with --onto: fuzz is never allowed there")
    from imgbuild.report.matrix import matrix_markdown, matrix_table  # rich and the carry machinery: only with --onto
    from imgbuild.workflows.matrix import check_onto

    project = load_project()
    note_rebase(project.root)
    matrix = check_onto(project, refs, strict=strict)
    if markdown is not None:
        text = matrix_markdown(matrix)
        if str(markdown) == "-":
            print(text, end="")
        else:
            # appended, as GitHub expects for $GITHUB_STEP_SUMMARY
            with open(os.fspath(markdown), "a", encoding="utf-8") as fh:
                fh.write(text)
    if as_json:
        print_json("patches-check-onto", matrix.to_json())
    elif markdown is None or str(markdown) != "-":
        tables.console.print(matrix_table(matrix))
        for ref in matrix.refs:
            tables.console.print(f"{ref.tag}: {matrix.seconds.get(ref.ref, 0.0):.3f} s")
        tables.console.print(f"[green]{matrix.summary}[/]" if matrix.ok else f"[bold red]{matrix.summary}[/]")
    if not matrix.ok:
        raise CheckFailed(matrix.summary, hint="`imgbuild patches rebase --onto REF` carries the stack", reported=True)
