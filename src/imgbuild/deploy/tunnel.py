"""A short-lived loopback registry for nodes whose `docker load` needs every layer (the containerd store).

The image is pushed once to a docker-registry on 127.0.0.1 here; a node
pulls it by digest, and a pull fetches only the blobs the node lacks. The
node reaches the registry on its own loopback: directly when it runs on this
machine, through `ssh -R` when it is an ssh:// node (docker treats
127.0.0.0/8 as an insecure registry, so no TLS is needed on either side).
Bytes to each node are counted by a forwarder in front of the registry.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import requests

from imgbuild import proc
from imgbuild.deploy.ssh import ssh_base
from imgbuild.errors import DockerError

REPOSITORY = "imgbuild-ship/image"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Forward:
    """127.0.0.1:port -> target, counting the bytes that go back to the caller."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.bytes_down = 0
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(32)
        self.port = int(self._server.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=60)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if down:
                    with self._lock:
                        self.bytes_down += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.close()


@contextlib.contextmanager
def loopback_registry() -> Iterator[int]:
    """Run Debian's docker-registry on a free loopback port until the block ends; yields the port."""
    binary = shutil.which("docker-registry")
    if binary is None:
        raise DockerError(
            "a node on the containerd image store needs a loopback registry, and docker-registry is not installed",
            hint="apt-get install docker-registry, or pass --with-base to send the whole image as an archive",
        )
    with tempfile.TemporaryDirectory(prefix="imgbuild-ship-registry-") as tmp:
        port = _free_port()
        config = Path(tmp) / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {tmp}/data\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n"
        )
        child = proc.popen([binary, "serve", str(config)], stdout=proc.DEVNULL, stderr=proc.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(requests.RequestException):
                    if requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2).status_code == 200:
                        break
                if child.poll() is not None or time.monotonic() > deadline:
                    raise DockerError(f"the loopback registry on 127.0.0.1:{port} did not start")
                time.sleep(0.2)
            yield port
        finally:
            child.terminate()
            with contextlib.suppress(proc.TimeoutExpired):
                child.wait(timeout=10)


@contextlib.contextmanager
def node_path(node_url: str, local_port: int) -> Iterator[int]:
    """The port on the node's loopback that reaches `local_port` here."""
    if node_url.startswith("unix://"):
        yield local_port  # the daemon runs on this machine
        return
    if node_url.startswith("ssh://"):
        remote = _free_port()  # a guess at a free port there; ssh fails clearly when it is taken
        argv = [*ssh_base(node_url), "-N", "-o", "ExitOnForwardFailure=yes", "-R", f"{remote}:127.0.0.1:{local_port}"]
        parts = urlsplit(node_url)
        try:
            child = proc.popen([*argv, "--", str(parts.hostname)], stderr=proc.PIPE)
        except proc.ToolNotFound as exc:
            raise DockerError(
                f"{node_url}: cannot open the registry tunnel: {exc}", hint="install openssh-client"
            ) from exc
        try:
            time.sleep(1.0)  # ExitOnForwardFailure: a failed forward ends ssh at once
            if child.poll() is not None:
                err = child.stderr.read().decode(errors="replace") if child.stderr else ""
                raise DockerError(f"{node_url}: cannot open the registry tunnel (ssh -R): {err.strip()}")
            yield remote
        finally:
            child.terminate()
            with contextlib.suppress(proc.TimeoutExpired):
                child.wait(timeout=10)
        return
    host = urlsplit(node_url).hostname or ""
    if host in ("127.0.0.1", "localhost", "::1"):
        yield local_port
        return
    raise DockerError(
        f"{node_url}: this node's docker load needs every layer (containerd image store), and a registry here "
        "cannot be reached from it over tcp://",
        hint="ship to it as ssh://user@host (a tunnel is made), or pass --with-base to send the whole archive",
    )
