"""tests/unit/ is in-process only: a test here that starts a process (git, the CLI, any
tool) fails, naming the folder it belongs in (tests/git/)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

SPAWNS = ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "os.fork")
_running: list[str] = []  # the unit test now running, if any
_hooked: list[bool] = []


def _refuse_processes(event: str, args: tuple[object, ...]) -> None:
    if _running and event in SPAWNS:
        raise RuntimeError(f"{_running[-1]} starts a process ({event} {args[:2]!r}): move it to tests/git/")


@pytest.fixture(autouse=True)
def _in_process_only(request: pytest.FixtureRequest) -> Iterator[None]:
    if not _hooked:  # audit hooks cannot be removed: added only once a unit test runs
        sys.addaudithook(_refuse_processes)
        _hooked.append(True)
    _running.append(request.node.nodeid)
    try:
        yield
    finally:
        _running.pop()
