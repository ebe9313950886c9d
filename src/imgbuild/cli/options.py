"""Options shared by several commands."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from imgbuild.project import Project

# The running command's --project/-C (cli.app.main sets it for each command; None: not given).
CHOSEN: ContextVar[Path | None] = ContextVar("imgbuild_project", default=None)


def find_root() -> Path:
    """The project directory of the running command: --project, else $IMGBUILD_PROJECT, else the nearest parent."""
    from imgbuild.root import find_root as find

    return find(chosen=CHOSEN.get())


def load_project() -> Project:
    """The project of the running command (as `find_root` finds it), loaded."""
    from imgbuild.project import load_project as load

    return load(CHOSEN.get())


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
FuzzOpt = Annotated[
    int,
    typer.Option(
        "--allow-fuzz",
        min=0,
        max=3,
        help="Accept hunks that only match after dropping up to N context lines. Refused when CI is set.",
    ),
]
