"""All pip runs: `python -m pip` of the interpreter imgbuild runs on, through the process funnel (imgbuild/proc.py);
the exit status is the caller's to turn into its error."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from imgbuild import proc


def command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pip", *args]


def run(args: Sequence[str]) -> proc.CompletedProcess[str]:
    """pip with its stdout and stderr captured as text."""
    return proc.run(command(args), text=True)


def run_logged(args: Sequence[str], *, env: Mapping[str, str], verbose: bool) -> proc.CompletedProcess[str]:
    """pip with `env` added, stdout and stderr as one text: shown on our stderr with `verbose` (so that `--json`
    keeps stdout to itself), else captured in `.stdout` for the caller's error."""
    return proc.run(
        command(args),
        env={**os.environ, **env},
        text=True,
        capture=False,
        stdout=sys.stderr if verbose else proc.PIPE,
        stderr=proc.STDOUT,
    )
