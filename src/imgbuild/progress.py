"""Progress lines: `Say`, the one type of the callback a long step (build, publish, rebase, bump, the cache mirror)
takes to tell the user what it is doing, one line at a time, and its two ends: `to_stderr`, what the commands pass,
and `quiet`. stdout stays the command's result (one JSON document under `--json`)."""

from __future__ import annotations

import sys
from collections.abc import Callable

Say = Callable[[str], None]


def to_stderr(line: str) -> None:
    """Say `line` on stderr."""
    print(line, file=sys.stderr)


def quiet(_: str) -> None:
    """Say nothing."""
