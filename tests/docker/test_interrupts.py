"""Ctrl-C and kill -9 while imgbuild has a container: it is labelled, and it never stays behind.

The image is a static `sleep` compiled here and imported FROM nothing, so the
container lives as long as the test wants and no image has to be pulled.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator

import pytest

from imgbuild.engine import CONTAINER_LABEL, Engine
from tests.support import needs

pytestmark = pytest.mark.docker

SLEEP_C = "#include <stdlib.h>\n#include <unistd.h>\nint main(int c, char **v) { sleep(atoi(v[1])); return 0; }\n"
SCRIPT = "import sys\nfrom imgbuild.engine import Engine\nEngine.connect().run(sys.argv[1], ['/sleep', '30'])\n"


@pytest.fixture(scope="module")
def sleep_image(engine: Engine, tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Iterator[str]:
    needs.tool("gcc", "docker", "a static sleep binary for the test image, `gcc -static`")
    tmp = tmp_path_factory.mktemp("sleep")
    (tmp / "sleep.c").write_text(SLEEP_C)
    subprocess.run(["gcc", "-static", "-O1", "-o", str(tmp / "sleep"), str(tmp / "sleep.c")], check=True)
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(tmp / "sleep", arcname="sleep")
    ref = f"{prefix}-sleep:1"
    engine.client.api.import_image_from_data(data.getvalue(), repository=f"{prefix}-sleep", tag="1")
    yield ref
    engine.client.api.remove_image(ref, force=True)


def ours(engine: Engine, pid: int) -> list[str]:
    found = engine.client.api.containers(all=True, filters={"label": f"{CONTAINER_LABEL}={pid}"})
    return [c["Id"] for c in found]


def start_and_wait_for_container(engine: Engine, image: str) -> tuple[subprocess.Popen[bytes], float]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, image], stderr=subprocess.PIPE)
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
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT, sleep_image], stderr=subprocess.DEVNULL)
        time.sleep(max(0.0, when + step * 0.01))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        pids.append(proc.pid)
    time.sleep(1.0)  # a remove the daemon was still doing when the process ended
    assert [pid for pid in pids if ours(engine, pid)] == []
