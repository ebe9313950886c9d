"""The one way tests run the `imgbuild` command: as a user does (a subprocess), or in-process.

Every tier uses these (and the `cli` fixture in tests/conftest.py hands out the same runner):
a subprocess where the process itself is under test (exit codes, signals, start-up, stdout
discipline), in-process where only the command's behaviour is, which saves an interpreter
start and every import per call.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the type of `imgbuild` below and of the `cli` fixture


def imgbuild(
    project: Path | None, *args: str, env: Mapping[str, str] | None = None, **more_env: str
) -> subprocess.CompletedProcess[str]:
    """`imgbuild [-C PROJECT] ARGS...` in a subprocess; wide COLUMNS so rich tables do not wrap."""
    where = ["-C", str(project)] if project is not None else []
    return subprocess.run(
        [sys.executable, "-m", "imgbuild", *where, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200", **(env or {}), **more_env},
    )


def imgbuild_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The real entry point (errors printed in one place) in this process: (exit code, stdout, stderr)."""
    from imgbuild.cli.main import run

    capsys.readouterr()  # what the test printed before is not the command's
    old = sys.argv
    sys.argv = ["imgbuild", *args]
    try:
        run()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return code, captured.out, captured.err
