"""The engine API's read-only calls over a local unix socket, with http.client.

Inspecting images, listing them and asking the daemon's version is most of
what a no-op build or a check does; the docker SDK (with requests and urllib3)
costs more to import than those calls take. Engine uses this for them when the
daemon is a local socket, and the SDK for everything else.

Any answer but 2xx (and 404 where the caller expects it), and any socket
error, is `Unanswered`: the caller repeats the call through the SDK, so
errors read exactly as they always have.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import Any

DEFAULT_SOCKET = "/var/run/docker.sock"


class Unanswered(Exception):
    """The call did not get a usable answer here; ask through the SDK instead."""


def local_socket(environ: dict[str, str] | None = None) -> str | None:
    """The daemon's socket path when it is a local unix socket without TLS, else None (the SDK decides)."""
    env = os.environ if environ is None else environ
    if env.get("DOCKER_TLS_VERIFY") or env.get("DOCKER_CERT_PATH"):
        return None
    host = env.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    if not host.startswith("unix://"):
        return None
    return host.removeprefix("unix://") or DEFAULT_SOCKET


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class EngineApi:
    """GET requests to the daemon; one short connection each (a local connect costs microseconds,
    and no connection is shared between threads)."""

    def __init__(self, path: str, timeout: float = 300.0) -> None:
        self.path = path
        self.timeout = timeout

    def get(self, url: str, query: dict[str, Any] | None = None, *, missing_ok: bool = False) -> Any:
        """The decoded JSON answer; None for 404 when `missing_ok`; Unanswered otherwise."""
        if query:
            url += "?" + urllib.parse.urlencode(query)
        conn = _UnixConnection(self.path, self.timeout)
        try:
            conn.request("GET", url, headers={"Accept": "application/json"})
            response = conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise Unanswered(str(exc)) from exc
        finally:
            conn.close()
        if response.status == 404 and missing_ok:
            return None
        if not 200 <= response.status < 300:
            raise Unanswered(f"{response.status} {body[:200]!r}")
        try:
            return json.loads(body) if body.strip() else None
        except ValueError as exc:
            raise Unanswered(f"not JSON: {exc}") from exc

    def ping(self) -> bool:
        conn = _UnixConnection(self.path, self.timeout)
        try:
            conn.request("GET", "/_ping")
            response = conn.getresponse()
            return response.status == 200 and response.read().strip() == b"OK"
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def inspect_image(self, ref: str) -> dict[str, Any] | None:
        found = self.get(f"/images/{urllib.parse.quote(ref, safe='')}/json", missing_ok=True)
        if found is not None and not isinstance(found, dict):
            raise Unanswered("image inspect: not an object")
        return found

    def version(self) -> dict[str, Any]:
        return self._object("/version")

    def info(self) -> dict[str, Any]:
        return self._object("/info")

    def containers(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        return self._list("/containers/json", {"all": "1", "filters": _filters(filters)})

    def images(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        return self._list("/images/json", {"filters": _filters(filters)})

    def _object(self, url: str) -> dict[str, Any]:
        found = self.get(url)
        if not isinstance(found, dict):
            raise Unanswered(f"{url}: not an object")
        return found

    def _list(self, url: str, query: dict[str, Any]) -> list[dict[str, Any]]:
        found = self.get(url, query)
        if not isinstance(found, list):
            raise Unanswered(f"{url}: not a list")
        return found


def _filters(filters: dict[str, str]) -> str:
    # the engine's filter syntax, as the SDK writes it: {"label": ["k=v"]}
    return json.dumps({k: [v] for k, v in filters.items()})
