"""`ssh://user@host[:port]` as the docker CLI reaches it: `ssh ... -- host docker system dial-stdio`.

The docker SDK's own ssh transport needs paramiko; this does what the docker
CLI does instead, with the user's `ssh` (its config, agent and known hosts):
a unix socket in a private temp dir, and for each connection the SDK opens
there, one `ssh` process whose stdin/stdout carry that connection to the
node's daemon.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

from imgbuild import proc
from imgbuild.errors import DockerError


def ssh_base(url: str) -> list[str]:
    """`ssh` with the user and port of `url`, options still to come (pure)."""
    parts = urlsplit(url)
    if parts.scheme != "ssh" or not parts.hostname:
        raise DockerError(f"{url}: not an ssh://[user@]host[:port] URL")
    argv = [os.environ.get("IMGBUILD_SSH", "ssh"), "-o", "BatchMode=yes"]
    if parts.username:
        argv += ["-l", parts.username]
    if parts.port:
        argv += ["-p", str(parts.port)]
    return argv


def ssh_command(url: str) -> list[str]:
    """The ssh argv that reaches the docker daemon behind `url` (pure)."""
    return [*ssh_base(url), "--", str(urlsplit(url).hostname), "docker", "system", "dial-stdio"]


class SSHDial:
    """A local unix socket that reaches a node's docker daemon over ssh."""

    def __init__(self, url: str) -> None:
        self.argv = ssh_command(url)
        self._dir = Path(tempfile.mkdtemp(prefix="imgbuild-ssh-"))
        self.path = self._dir / "docker.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(16)
        self._procs: list[proc.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            try:
                child = proc.popen(self.argv, stdin=proc.PIPE, stdout=proc.PIPE, stderr=proc.DEVNULL)
            except (OSError, proc.ToolNotFound):
                conn.close()
                continue
            with self._lock:
                self._procs.append(child)
            threading.Thread(target=self._up, args=(conn, child), daemon=True).start()
            threading.Thread(target=self._down, args=(conn, child), daemon=True).start()

    @staticmethod
    def _up(conn: socket.socket, child: proc.Popen[bytes]) -> None:
        assert child.stdin is not None
        try:
            while data := conn.recv(1 << 16):
                child.stdin.write(data)
                child.stdin.flush()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                child.stdin.close()

    @staticmethod
    def _down(conn: socket.socket, child: proc.Popen[bytes]) -> None:
        assert child.stdout is not None
        try:
            while data := os.read(child.stdout.fileno(), 1 << 16):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            procs = list(self._procs)
        for child in procs:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=10)
                except proc.TimeoutExpired:
                    child.kill()
        shutil.rmtree(self._dir, ignore_errors=True)
