"""A second dockerd on this machine that stands for a cluster node, for `imgbuild ship` tests.

It gets its own data root, exec root, pidfile, unix socket (plus a loopback
TCP port, so a proxy can cut the line), containerd namespaces and its own
bridge. Never `"bridge": "none"`: a dockerd started so deletes docker0 and
breaks every container of the main daemon. It does not touch iptables.
Everything it made is removed on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker


@dataclass(frozen=True)
class Node:
    socket: str  # unix:///...
    tcp_port: int
    root: Path

    @property
    def tcp(self) -> str:
        return f"tcp://127.0.0.1:{self.tcp_port}"

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.socket, version="auto", timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


@contextlib.contextmanager
def node_daemon(root: Path, bridge: str) -> Iterator[Node]:
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    sock = root / "docker.sock"
    with contextlib.suppress(subprocess.CalledProcessError):
        _run("ip", "link", "del", bridge)  # left over from an interrupted run of ours
    _run("ip", "link", "add", bridge, "type", "bridge")
    log = (root / "dockerd.log").open("wb")
    proc = None
    try:
        _run("ip", "addr", "add", "10.214.77.1/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        proc = subprocess.Popen(
            [
                "dockerd",
                f"--data-root={root / 'data'}",
                f"--exec-root={root / 'exec'}",
                f"--pidfile={root / 'dockerd.pid'}",
                f"--host=unix://{sock}",
                f"--host=tcp://127.0.0.1:{port}",
                f"--bridge={bridge}",
                "--iptables=false",
                "--ip-masq=false",
                "--containerd-namespace=imgbuild-node",
                "--containerd-plugins-namespace=imgbuild-node-plugins",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        node = Node(f"unix://{sock}", port, root)
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(Exception):
                node.client().ping()
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the node dockerd did not start: {(root / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield node
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "link", "del", bridge)
        data = root / "data"
        if data.exists():  # overlay mounts are gone with the daemon; anything left is ours
            subprocess.run(["umount", "-R", str(data)], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)
        assert os.path.exists("/sys/class/net/docker0"), "docker0 must survive a node daemon"
