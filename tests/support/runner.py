"""The one way tests run the `imgbuild` command: as a user does (a subprocess), or in-process.

Every tier uses these (and the `cli` fixture in tests/conftest.py hands out the same runner):
a subprocess where the process itself is under test (exit codes, signals, start-up, stdout
discipline), in-process where only the command's behaviour is, which saves an interpreter
start and every import per call.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the type of `imgbuild` below and of the `cli` fixture


def imgbuild(
    project: Path | None, *args: str, env: Mapping[str, str] | None = None, **more_env: str
) -> subprocess.CompletedProcess[str]:
    """`imgbuild [-C PROJECT] ARGS...` in a subprocess; wide COLUMNS so rich tables do not wrap."""
    where = ["-C", str(project)] if project is not None else []
    done = subprocess.run(
        [sys.executable, "-m", "imgbuild", *where, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200", **(env or {}), **more_env},
    )
    return checked(done, args)


def imgbuild_here(
    project: Path | None, *args: str, env: Mapping[str, str] | None = None, **more_env: str
) -> subprocess.CompletedProcess[str]:
    """The same command through the real entry point (errors printed in one place), in this process.

    No interpreter start and no imports per call. For what only a process shows (start-up
    imports, signals, a second process holding a lock) use `imgbuild`.
    """
    from imgbuild.cli.main import run

    where = ["-C", str(project)] if project is not None else []
    argv = ["imgbuild", *where, *args]
    changes = {"COLUMNS": "200", **(env or {}), **more_env}
    saved = {k: os.environ.get(k) for k in changes}
    out, err = io.StringIO(), io.StringIO()
    old_argv = sys.argv
    os.environ.update(changes)
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                run()
                code = 0
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        sys.argv = old_argv
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return checked(subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue()), args)


def checked(done: subprocess.CompletedProcess[str], args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """A `--json` run's stdout is one document valid against its schema (tests/support/jsonschema_check.py),
    whatever the test goes on to read of it: success or failure, a `--json` run prints one (an empty stdout fails)."""
    if "--json" in args and "--help" not in args:
        from tests.support.jsonschema_check import load_json

        if not done.stdout.strip():
            raise AssertionError(
                f"imgbuild {' '.join(args)} printed nothing on stdout (exit {done.returncode}); under --json every "
                f"run prints one document. stderr: {done.stderr[-600:]}"
            )

        try:
            load_json(done.stdout)
        except ValueError as exc:  # not JSON at all
            raise AssertionError(f"imgbuild {' '.join(args)} --json printed no JSON document: {exc}") from exc
    return done


def imgbuild_captured(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`imgbuild_here` for tests that read (exit code, stdout, stderr)."""
    capsys.readouterr()
    done = imgbuild_here(None, *args)
    return done.returncode, done.stdout, done.stderr


@dataclass(frozen=True)
class Interrupted:
    pid: int
    returncode: int
    stderr: str  # what it printed before the signal and after


def default_sigint() -> None:
    """`preexec_fn` for a child a test will send SIGINT: SIGINT back to its default, whatever this process has.
    A suite started from a background job or `nohup` inherits SIGINT ignored (POSIX shells do so for `&` without
    job control), its children too, and Python keeps an inherited SIG_IGN: the Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ctrl_c(project: Path, *args: str, when: str, after: float) -> Interrupted:
    """`imgbuild -C PROJECT ARGS...` in a subprocess, sent SIGINT `after` seconds past the first stderr line
    holding `when` (as a user's Ctrl-C would be); waits for it to exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "imgbuild", "-C", str(project), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
        preexec_fn=default_sigint,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if when in line:
            time.sleep(after)
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=120)[1]
    return Interrupted(proc.pid, proc.returncode, "".join(seen) + rest)
