"""Options shared by several commands."""

from __future__ import annotations

from typing import Annotated

import typer

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
