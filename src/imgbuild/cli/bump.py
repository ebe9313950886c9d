"""`imgbuild patches bump`: forwarder to workflows/bump.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from imgbuild.cli.build import BaseOpt
from imgbuild.cli.options import JsonOpt


def _log(line: str) -> None:
    print(line, file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("bump")(bump_cmd)


def bump_cmd(
    onto: Annotated[
        str,
        typer.Option(
            "--onto",
            metavar="latest|REF",
            help="The release to move to: `latest` (default) or a tag, commit or release version.",
        ),
    ] = "latest",
    branch: Annotated[
        str | None,
        typer.Option("--branch", metavar="NAME", help="The branch to commit on (default: imgbuild/bump-TAG)."),
    ] = None,
    no_build: Annotated[
        bool, typer.Option("--no-build", help="Rebase and commit only; build and smoke-test nothing.")
    ] = False,
    base: BaseOpt = None,
    report_dir: Annotated[
        Path | None,
        typer.Option(
            "--report-dir",
            metavar="DIR",
            help="Where to write bump-TAG.md and .json (default: .imgbuild-work/reports/).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Carry the series onto the newest vLLM release as one change on a new branch, built and smoke-tested.

    Rebases the series (as `patches rebase --onto`) on a new git branch of the project, commits the
    rebased patches and pin there, builds every variant and smoke-tests it (as `imgbuild build`), and
    writes the review report: per patch carried, offset, 3-way, moved, upstreamed or conflicting, the
    range-diffs, the image ids. Nothing happens when the pin already is the newest release.

    A conflict stops it with the rebase's exit code (5), the rebase in progress and the per-hunk
    report written: resolve (docs/rebase-runbook.md), run `imgbuild patches rebase --continue`, then
    `imgbuild patches bump` again, which commits and builds the finished rebase.
    """
    from imgbuild.cli.build import options
    from imgbuild.project import find_root
    from imgbuild.report.tables import console, print_json
    from imgbuild.workflows import bump

    root = find_root()
    opts = None if no_build else options(base, None)
    done = bump.bump(root, onto, branch=branch, build=opts, report_dir=report_dir, log=_log)
    if as_json:
        print_json("patches-bump", done.to_json())
    else:
        console.print(done.message, markup=False, highlight=False)
        if done.report is not None:
            console.print(f"review report: {done.report}", markup=False, highlight=False)
    if done.error is not None:
        done.error.reported = as_json  # under --json the report above is the one document
        raise done.error
