"""The Docker daemon dies during a build and during a smoke run, and is started again: the run fails naming the
daemon (no traceback), no moving tag names an image that did not pass its smoke test, and once the daemon is
back the rerun completes and the run after changes nothing.

Never the host's dockerd: the tier starts its own (tests/support/node_daemon.py: its own data root, exec root,
pidfile, socket, containerd and bridge), kills that one with SIGKILL and starts it again on the same state.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imgbuild.owner import OWNER_LABEL
from tests.docker.conftest import MakeProject
from tests.support.jsonschema_check import load_json
from tests.support.node_daemon import DOCKERD26, Node, node_daemon, stop

pytestmark = pytest.mark.faults


@dataclass
class Daemon:
    node: Node
    restarted: list[subprocess.Popen[bytes]]

    @property
    def pid(self) -> int:
        return int((self.node.root / "dockerd.pid").read_text().strip())

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{self.pid}").exists() and not _zombie(self.pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def start(self) -> None:
        """The same dockerd on the same state (its containerd kept running)."""
        with contextlib.suppress(FileNotFoundError):
            (self.node.root / "dockerd.pid").unlink()
        log = (self.node.root / "dockerd.log").open("ab")
        self.restarted.append(
            subprocess.Popen(
                [DOCKERD26, f"--config-file={self.node.root / 'daemon.json'}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(Exception):
                self.node.client().ping()
                return
            assert self.restarted[-1].poll() is None and time.monotonic() < deadline, "the node dockerd did not restart"
            time.sleep(0.3)


def _zombie(pid: int) -> bool:
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, skeleton_base: str) -> Iterator[Daemon]:
    """One node daemon for the module (the skeleton loaded once); each test kills and restarts it."""
    root = tmp_path_factory.mktemp("dkill") / "node"
    with node_daemon(root, "br-imgb-flt", containerd_store=True, address="10.214.81.1/24") as node:
        # the skeleton base, as the node's own image (nothing can be pulled here)
        save = subprocess.Popen(["docker", "save", skeleton_base], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", node.socket, "load"], stdin=save.stdout, capture_output=True)
        assert save.wait() == 0 and load.returncode == 0, load.stderr
        d = Daemon(node, [])
        try:
            yield d
        finally:
            for proc in d.restarted:  # ours; node_daemon stops the first one and removes everything
                stop(proc)


def build_killing_dockerd(daemon: Daemon, project: Path, cache: Path, when: str, after: float) -> tuple[int, str]:
    """`imgbuild build` on the node daemon; SIGKILL its dockerd `after` s past the first stderr line holding
    `when`; start the daemon again once the run has ended. The run's exit code and stderr."""
    env = {**os.environ, "DOCKER_HOST": daemon.node.socket, "IMGBUILD_CACHE": str(cache), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "imgbuild", "-C", str(project), "build", "latest", "--base", "skeleton"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if when in line:
            time.sleep(after)
            daemon.kill()
            break
    rest = proc.communicate(timeout=600)[1]
    daemon.start()
    return proc.returncode, "".join(seen) + rest


def node_tags(daemon: Daemon, repo: str) -> dict[str, str]:
    images = daemon.node.client().images.list(name=repo)
    return {t: img.id for img in images for t in img.tags if t.startswith(f"{repo}:")}


def converges(daemon: Daemon, project: Path, cache: Path, repo: str) -> None:
    env = {**os.environ, "DOCKER_HOST": daemon.node.socket, "IMGBUILD_CACHE": str(cache)}
    argv = [sys.executable, "-m", "imgbuild", "-C", str(project), "build", "latest", "--base", "skeleton", "--json"]
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    (image,) = load_json(again.stdout)["images"]
    tags = node_tags(daemon, repo)
    assert tags[f"{repo}:latest"] == tags[image["immutable"]] == image["image_id"], tags
    third = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert third.returncode == 0 and load_json(third.stdout)["images"][0]["image_id"] == image["image_id"]
    assert node_tags(daemon, repo) == tags
    left = daemon.node.client().api.containers(all=True, filters={"label": OWNER_LABEL})
    assert left == [], left  # the killed run's smoke container went with the rerun's leftover check


@pytest.mark.parametrize(("when", "after"), [("building", 0.3), ("smoke-testing", 0.5)])
def test_dockerd_killed_and_restarted_mid_run(
    daemon: Daemon, make_project: MakeProject, prefix: str, tmp_path: Path, when: str, after: float
) -> None:
    name = "dkill-" + when.split("-")[0]
    project, cache, repo = make_project(name), tmp_path / "cache", f"{prefix}-{name}"
    code, err = build_killing_dockerd(daemon, project, cache, when, after)
    assert code == 7, err[-3000:]
    assert "Traceback" not in err, err
    assert "Docker daemon" in err and "start the daemon" in err, err[-2000:]  # which step, and what to do
    print(f"dockerd killed at {when!r}: {err.strip().splitlines()[-2:]}")
    assert f"{repo}:latest" not in node_tags(daemon, repo)  # the moving tag never names an unsmoked image
    converges(daemon, project, cache, repo)
