"""A loopback TCP proxy in front of a registry that injects faults into chosen HTTP requests.

Each client connection carries one request: the proxy reads its head, rewrites `Connection:` to `close` (so the
registry closes after answering and the client opens a new connection for the next request), and then either
forwards the bytes both ways untouched or, when a `Fault` matches the request line, answers it itself: a 5xx, a
connection closed without an answer, or the registry process killed first (what is left of the request then
finds nobody to answer it). Every request line seen is kept, with what was done to it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Fault:
    method: str  # "PUT", "PATCH", ...; "*" for any
    path: str  # a regular expression searched in the path
    action: str  # "503", "500", "close", "kill" (kill the registry process, then close) or "call" (call, forward)
    times: int | None = None  # how many matching requests get it; None: every one
    hits: int = 0
    call: Callable[[], None] | None = None  # for "call": e.g. SIGKILL the client's parent, then forward it

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return (self.method in ("*", method)) and re.search(self.path, path) is not None


@dataclass
class FaultProxy:
    upstream_port: int
    registry_pid: Callable[[], int]  # the registry's pid, asked when a "kill" fault fires
    faults: list[Fault] = field(default_factory=list)
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, "forwarded" or the fault)
    port: int = 0
    _server: socketserver.ThreadingTCPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server, self.port = server, int(server.server_address[1])
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _decide(self, method: str, path: str) -> tuple[str, Fault | None]:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    self.seen.append((method, path, fault.action))
                    return fault.action, fault
            self.seen.append((method, path, "forwarded"))
            return "forwarded", None

    def _handle(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                return
            head += chunk
            if head.startswith(b"\x16"):  # a TLS hello (docker tries https first): the registry answers it in
                self._forward(client, head)  # plain HTTP, and docker falls back to http
                return
        head, _, rest = head.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        method, path = [*lines[0].decode(errors="replace").split(" "), "", ""][:2]
        action, fault = self._decide(method, path)
        if action in ("500", "503"):
            reason = {"500": "Internal Server Error", "503": "Service Unavailable"}[action]
            body = b'{"errors":[{"code":"UNAVAILABLE","message":"injected fault"}]}'
            client.sendall(
                f"HTTP/1.1 {action} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n".encode()
                + body
            )
            return
        if action == "kill":
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.registry_pid(), signal.SIGKILL)
        if action == "call" and fault is not None and fault.call is not None:
            fault.call()
        if action in ("close", "kill"):
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            return
        kept = [ln for ln in lines[1:] if not ln.lower().startswith((b"connection:", b"keep-alive:"))]
        self._forward(client, b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n" + rest)

    def _forward(self, client: socket.socket, first: bytes) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
        except OSError:
            return  # the registry is gone: the client sees its connection closed
        upstream.settimeout(None)
        with upstream:
            upstream.sendall(first)
            _pipe(client, upstream)


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    """Copy both ways until the registry has answered and closed (it was asked to: `Connection: close`)."""

    def copy(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    threading.Thread(target=copy, args=(client, upstream), daemon=True).start()
    copy(upstream, client)
