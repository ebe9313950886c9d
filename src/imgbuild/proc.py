"""Every external process goes through here: IMGBUILD_ECHO=1 prints `+ argv` on stderr before it runs; a missing
executable or a timeout becomes `ToolNotFound` or `ToolTimeout`."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ECHO = "IMGBUILD_ECHO"

PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
CompletedProcess = subprocess.CompletedProcess

Stream = int | IO[Any] | None


class ToolNotFound(Exception):
    """The executable of `argv[0]` is not there (not installed, not on PATH)."""

    def __init__(self, tool: str) -> None:
        super().__init__(f"{tool} is not installed (not found on PATH)")
        self.tool = tool


class ToolTimeout(Exception):
    """A command ran past its timeout and was killed."""

    def __init__(self, argv: Sequence[str], seconds: float) -> None:
        super().__init__(f"{shlex.join(argv)} did not finish within {seconds:g} s")
        self.tool = argv[0]
        self.seconds = seconds


def echo(argv: Iterable[str]) -> None:
    """Print `+ argv` on stderr when echoing (also for what is not a process: SDK calls)."""
    if os.environ.get(ECHO):  # one write per line: two builds echo from two threads
        sys.stderr.write("+ " + shlex.join(argv) + "\n")
        sys.stderr.flush()


def run(
    argv: Sequence[str],
    *,
    input: bytes | str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
    text: bool = False,
    capture: bool = True,
    stdout: Stream = None,
    stderr: Stream = None,
) -> subprocess.CompletedProcess[Any]:
    """Run `argv` to the end; its exit status is the caller's to read. `capture=False` sends stdout and stderr to
    `stdout`/`stderr`; `env` replaces the environment (None: inherit it)."""
    echo(argv)
    try:
        return subprocess.run(
            list(argv),
            input=input,
            env=None if env is None else dict(env),
            cwd=cwd,
            timeout=timeout,
            text=text,
            check=False,
            stdout=PIPE if capture else stdout,
            stderr=PIPE if capture else stderr,
        )
    except FileNotFoundError as exc:
        if cwd is not None and exc.filename is not None and str(exc.filename) == str(cwd):
            raise  # a missing `cwd` stays the OSError it is
        raise ToolNotFound(argv[0]) from exc
    except subprocess.TimeoutExpired as exc:
        raise ToolTimeout(argv, timeout or 0) from exc
