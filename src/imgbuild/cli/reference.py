"""`python3 -m imgbuild.cli.reference > docs/reference.md`, from the repository root: the reference, rendered from
this app (report/reference.py); `.ci/run` and tests/unit/test_reference.py compare it with the committed file."""

from __future__ import annotations

import sys
from pathlib import Path


def reference(root: Path) -> str:
    """docs/reference.md as the code at `root` (a checkout: its docs/schema/) makes it."""
    import typer.main
    from typer.core import TyperGroup

    from imgbuild.cli.app import app
    from imgbuild.report.reference import render

    command = typer.main.get_command(app)
    assert isinstance(command, TyperGroup)
    return render(command, root / "docs" / "schema")


if __name__ == "__main__":
    if not (Path.cwd() / "docs" / "schema").is_dir():
        sys.exit("error: no docs/schema/ here: run it from the repository root")
    sys.stdout.write(reference(Path.cwd()))
