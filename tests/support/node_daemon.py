"""A second dockerd on this machine that stands for a cluster node (tests/docker/test_sparkrun_distribution.py).

It gets its own data root, exec root, pidfile, unix socket (plus a loopback
TCP port, so a proxy can cut the line), containerd namespaces and its own
bridge. Never `"bridge": "none"`: a dockerd started so deletes docker0 and
breaks every container of the main daemon. It does not touch iptables.
Everything it made is removed on exit.

With `gpu=True` the node looks like a DGX Spark to sparkrun without having a GPU: tests/support/node-bin/ (NODE_BIN)
goes first on dockerd's PATH, so its stand-in `nvidia-container-runtime-hook` makes dockerd register the NVIDIA
device driver and `docker run --gpus all` starts (attaching nothing; each call is logged to `Node.hook_log`); a login
on the node gets the same directory first on its PATH (`node_path()`, sshd_to's `env`), where the stand-in
`nvidia-smi` answers sparkrun's hardware probe as one GB10.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker

NODE_BIN = Path(__file__).resolve().parent / "node-bin"


def node_path() -> str:
    """A PATH with the stand-ins of NODE_BIN first: for the node dockerd and for logins on the node."""
    return f"{NODE_BIN}:{os.environ.get('PATH', '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')}"


@dataclass(frozen=True)
class Node:
    socket: str  # unix:///...
    tcp_port: int
    root: Path

    @property
    def tcp(self) -> str:
        return f"tcp://127.0.0.1:{self.tcp_port}"

    @property
    def hook_log(self) -> Path:
        """One line per container the stand-in NVIDIA hook saw start (`gpu=True`)."""
        return self.root / "nvidia-hook.log"

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.socket, version="auto", timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


def _dockerd26() -> str:
    """A dockerd 26+ for a containerd-store node: $IMGBUILD_DOCKERD26, an unpacked
    one in /opt/docker26, or the host's own when .ci/setup-host.sh installed 26."""
    if "IMGBUILD_DOCKERD26" in os.environ:
        return os.environ["IMGBUILD_DOCKERD26"]
    unpacked = "/opt/docker26/usr/sbin/dockerd"
    host = shutil.which("dockerd")
    if not Path(unpacked).exists() and host:
        out = subprocess.run([host, "--version"], capture_output=True, text=True, check=False).stdout
        found = re.search(r"version (\d+)\.", out)
        if found and int(found.group(1)) >= 26:
            return host
    return unpacked


DOCKERD26 = _dockerd26()


def stop(proc: subprocess.Popen[bytes]) -> None:
    """A daemon we started, stopped as its service would be: SIGTERM, then SIGKILL after 60 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def node_daemon(
    root: Path, bridge: str, *, containerd_store: bool = False, address: str = "10.214.77.1/24", gpu: bool = False
) -> Iterator[Node]:
    """A node daemon: dockerd 20.10, or with `containerd_store` a dockerd 26 (DOCKERD26) on a containerd of its own;
    with `gpu`, the stand-in NVIDIA hook on its PATH (the module's docstring)."""
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    sock = root / "docker.sock"
    config: dict[str, object] = {
        "data-root": str(root / "data"),
        "exec-root": str(root / "exec"),
        "pidfile": str(root / "dockerd.pid"),
        "hosts": [f"unix://{sock}", f"tcp://127.0.0.1:{port}"],
        "bridge": bridge,
        "iptables": False,
        "ip-masq": False,
        "containerd-namespace": "imgbuild-node",
        "containerd-plugins-namespace": "imgbuild-node-plugins",
    }
    with contextlib.suppress(subprocess.CalledProcessError):
        _run("ip", "link", "del", bridge)  # left over from an interrupted run of ours
    _run("ip", "link", "add", bridge, "type", "bridge")
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        _run("ip", "addr", "add", address, "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        dockerd = "dockerd"
        if containerd_store:
            dockerd = DOCKERD26
            csock = root / "containerd.sock"
            (root / "containerd.toml").write_text(
                f'version = 2\nroot = "{root / "croot"}"\nstate = "{root / "cstate"}"\n'
                'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                f'[grpc]\n  address = "{csock}"\n[ttrpc]\n  address = "{csock}.ttrpc"\n'
            )
            logs.append((root / "containerd.log").open("wb"))
            procs.append(
                subprocess.Popen(
                    ["containerd", "--config", str(root / "containerd.toml")],
                    stdout=logs[-1],
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            config |= {"containerd": str(csock), "features": {"containerd-snapshotter": True}}
        (root / "daemon.json").write_text(json.dumps(config))
        logs.append((root / "dockerd.log").open("wb"))
        env = {**os.environ, "PATH": node_path(), "IMGBUILD_NODE_HOOK_LOG": str(root / "nvidia-hook.log")}
        procs.append(
            subprocess.Popen(
                [dockerd, f"--config-file={root / 'daemon.json'}"],
                stdout=logs[-1],
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env if gpu else None,
            )
        )
        node = Node(f"unix://{sock}", port, root)
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(Exception):
                node.client().ping()
                break
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                raise RuntimeError(f"the node dockerd did not start: {(root / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield node
    finally:
        for proc in reversed(procs):  # dockerd first, then its containerd
            stop(proc)
        for log in logs:
            log.close()
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "link", "del", bridge)
        for data in (root / "data", root / "croot"):
            if data.exists():  # mounts are gone with the daemons; anything left is ours
                subprocess.run(["umount", "-R", str(data)], capture_output=True, check=False)
        # and below exec/, which is no mount itself: netns/default, the host-network sandbox that a `--network host`
        # container (sparkrun's launch) leaves bind-mounted after dockerd stops
        for line in reversed(Path("/proc/self/mounts").read_text().splitlines()):
            point = line.split()[1]
            if point.startswith(f"{root / 'exec'}/"):
                subprocess.run(["umount", point], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)
        assert os.path.exists("/sys/class/net/docker0"), "docker0 must survive a node daemon"
