"""All pip and uv runs, through the process funnel (imgbuild/proc.py): pip is `python -m pip` of the interpreter
imgbuild runs on, uv the binary of the `uv` package; the exit status is the caller's to turn into its error."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from imgbuild import offline, proc


def command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pip", *args]


def run(args: Sequence[str]) -> proc.CompletedProcess[str]:
    """pip with its stdout and stderr captured as text (refused offline: every pip run here reaches an index)."""
    offline.refuse(f"`pip {' '.join(args[:2])}` needs a package index", "run the same command without --offline")
    return proc.run(command(args), text=True)


def run_uv(args: Sequence[str], *, verbose: bool, stdin: str | None = None) -> proc.CompletedProcess[str]:
    """uv with no user or project config; its log on our stderr with `verbose` (so that `--json` keeps stdout to
    itself), else captured with its stderr in `.stderr` for the caller's error. stdout is always captured."""
    from uv import find_uv_bin

    offline.refuse(
        f"`uv {' '.join(args[:2])}` installs packages that are not in the cache",
        "run the same command without --offline (the runtime base it makes then stays in the engine)",
    )

    return proc.run(
        [find_uv_bin(), *args, "--no-config", "--no-progress", "--python", sys.executable],
        input=stdin,
        text=True,
        capture=False,
        stdout=proc.PIPE,
        stderr=sys.stderr if verbose else proc.PIPE,
    )
