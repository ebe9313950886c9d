"""Ctrl-C and kill -9 while imgbuild has a container: it is labelled, and it never stays behind.

The image is a static `sleep` compiled here and imported FROM nothing, so the
container lives as long as the test wants and no image has to be pulled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from imgbuild.engine import Engine
from tests.support.owners import containers_of
from tests.support.runner import default_sigint
from tests.support.sleep_image import make_sleep_image

pytestmark = pytest.mark.docker

SCRIPT = "import sys\nfrom imgbuild.engine import Engine\nEngine.connect().run(sys.argv[1], ['/sleep', '30'])\n"


@pytest.fixture(scope="module")
def sleep_image(engine: Engine, tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Iterator[str]:
    ref = make_sleep_image(engine, tmp_path_factory.mktemp("sleep"), f"{prefix}-sleep", "docker")
    yield ref
    engine.client.api.remove_image(ref, force=True)


def ours(engine: Engine, pid: int) -> list[str]:
    return containers_of(engine, pid)


def start_and_wait_for_container(engine: Engine, image: str) -> tuple[subprocess.Popen[bytes], float]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, image], stderr=subprocess.PIPE, preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while not ours(engine, proc.pid):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        assert time.monotonic() < deadline, "the container never appeared (is it labelled?)"
        time.sleep(0.002)
    return proc, time.monotonic()


@pytest.mark.parametrize("delay_ms", [5, 8, 12, 16, 20])
def test_ctrl_c_right_after_the_container_is_created_leaves_nothing(
    engine: Engine, sleep_image: str, delay_ms: int
) -> None:
    proc, _ = start_and_wait_for_container(engine, sleep_image)
    time.sleep(delay_ms / 1000)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0  # it was interrupted, not finished
    assert ours(engine, proc.pid) == []


def test_a_killed_run_leaves_a_labelled_container_that_the_next_run_removes(engine: Engine, sleep_image: str) -> None:
    proc, _ = start_and_wait_for_container(engine, sleep_image)
    os.kill(proc.pid, signal.SIGKILL)  # no handler runs: the container stays
    proc.wait(timeout=60)
    left = ours(engine, proc.pid)
    assert len(left) == 1
    Engine.connect()  # the next imgbuild command
    assert ours(engine, proc.pid) == []


def test_ctrl_c_anywhere_around_the_create_call_leaves_nothing(engine: Engine, sleep_image: str) -> None:
    """Sweep SIGINT across the moments before and after the daemon makes the container: the window in
    which the daemon has made it but the client has not yet read its id (6 of 50 leaked before)."""
    started = time.monotonic()
    proc, appeared = start_and_wait_for_container(engine, sleep_image)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    when = appeared - started  # about when the create call returns, from the start of the process
    pids = []
    for step in range(-6, 4):
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, sleep_image], stderr=subprocess.DEVNULL, preexec_fn=default_sigint
        )
        time.sleep(max(0.0, when + step * 0.01))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        pids.append(proc.pid)
    time.sleep(1.0)  # a remove the daemon was still doing when the process ended
    assert [pid for pid in pids if ours(engine, pid)] == []
