"""A logging proxy on the Docker engine's socket: every HTTP request a client sends to the engine, counted.

    with EngineProxy(Path("/tmp/x/engine.sock")) as proxy:
        subprocess.run([...], env={**os.environ, "DOCKER_HOST": proxy.docker_host})
    proxy.requests  # ["GET /v1.45/version", "GET /v1.45/info", ...]

What IMGBUILD_ECHO=1 prints is what imgbuild says it does; this is what reached the engine, whoever made the call
(the docker SDK, a docker CLI process, buildx). A request is a request line at the start of a message on a
client's connection; bodies are skipped by Content-Length or chunked encoding, so a body is never read as one.
A connection the engine upgrades (attach, a build session) is passed through uncounted after the upgrade.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from pathlib import Path
from types import TracebackType

REQUEST = re.compile(rb"^(GET|HEAD|POST|PUT|DELETE|PATCH|OPTIONS) (\S+) HTTP/1\.[01]$")
ENGINE = "/var/run/docker.sock"


def requests_in(stream: bytes) -> tuple[list[str], bool]:
    """The request lines (`METHOD /path`, query left out) in the bytes a client sent on one connection, and
    whether it asked for an upgrade (after which the rest is not HTTP)."""
    out: list[str] = []
    pos = 0
    while pos < len(stream):
        end = stream.find(b"\r\n\r\n", pos)
        if end < 0:
            break
        head = stream[pos:end].split(b"\r\n")
        m = REQUEST.match(head[0])
        if not m:
            break
        out.append(f"{m[1].decode()} {m[2].decode().split('?')[0]}")
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(b":") for h in head[1:])}
        pos = end + 4
        if b"upgrade" in fields.get(b"connection", b"").lower():
            return out, True
        if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
            while True:
                eol = stream.find(b"\r\n", pos)
                if eol < 0:
                    return out, False
                size = int(stream[pos:eol].split(b";")[0], 16)
                pos = eol + 2 + size + 2
                if size == 0:
                    break
        else:
            pos += int(fields.get(b"content-length", b"0") or 0)
    return out, False


class EngineProxy:
    def __init__(self, path: Path, engine: str = ENGINE) -> None:
        self.path = path
        self.engine = engine
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._streams: list[bytearray] = []
        self._server: socket.socket | None = None

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    def __enter__(self) -> EngineProxy:
        self.path.unlink(missing_ok=True)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.close()
        self.path.unlink(missing_ok=True)

    def reset(self) -> list[str]:
        """The requests of the connections so far (each parsed whole), and start counting afresh."""
        with self._lock:
            streams, self._streams = self._streams, []
        found: list[str] = []
        for s in streams:
            found += requests_in(bytes(s))[0]
        self.requests += found
        return found

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.engine)
            seen = bytearray()
            with self._lock:
                self._streams.append(seen)
            threading.Thread(target=self._pipe, args=(client, upstream, seen), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, None), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, seen: bytearray | None) -> None:
        try:
            while data := src.recv(65536):
                if seen is not None:
                    seen += data
                dst.sendall(data)
        except OSError:
            pass  # the other side closed
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def check() -> None:
    one = b"GET /v1.45/version HTTP/1.1\r\nHost: x\r\n\r\n"
    two = b"POST /v1.45/images/x/tag?repo=a HTTP/1.1\r\nContent-Length: 5\r\n\r\nGET /"
    chunked = b"POST /build HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    assert requests_in(one + two + one) == (["GET /v1.45/version", "POST /v1.45/images/x/tag", "GET /v1.45/version"],
                                            False)  # fmt: skip
    assert requests_in(chunked + one) == (["POST /build", "GET /v1.45/version"], False)
    up = b"POST /session HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nGET / HTTP/1.1\r\n\r\n"
    assert requests_in(up) == (["POST /session"], True)


if __name__ == "__main__":
    check()
    print("engine_proxy check: ok")
