"""A loopback TCP forwarder that counts bytes and can cut the line.

Used between a registry client (the docker daemon) and a real
registry: `bytes_up` is what the client sent, headers included, and
`cut_after` drops every connection once that many bytes went up, which is
what a network failure in the middle of an upload looks like to both ends.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    def __init__(self, target_port: int, cut_after: int | None = None) -> None:
        self.target = ("127.0.0.1", target_port)
        self.cut_after = cut_after
        self.bytes_up = 0
        self.bytes_down = 0
        self.connections = 0
        self.cut = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = int(self._server.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self._lock:
            self.bytes_up = self.bytes_down = self.connections = 0

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=30)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):  # forward small writes at once, as the endpoints would
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    if up:
                        self.bytes_up += len(data)
                        if self.cut_after is not None and self.bytes_up > self.cut_after:
                            self.cut = True
                    else:
                        self.bytes_down += len(data)
                    cut = self.cut
                if cut:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
