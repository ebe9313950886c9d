"""The engine API's image calls over a local unix socket, with http.client.

Inspecting images, listing them and asking the daemon's version is most of
what a no-op build or a check does, and tag, untag and load the rest of a
build that runs no container; the docker SDK (with requests and urllib3)
costs more to import than those calls take. Engine uses this for them when the
daemon is a local socket, and the SDK for everything else.

Any answer but 2xx (and 404 where the caller expects it), and any socket
error, is `Unanswered`: the caller repeats the call through the SDK (each of
these calls can be repeated), so errors read exactly as they always have. An
error the daemon reports inside a load's 200 answer is `LoadFailed`.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import IO, Any

DEFAULT_SOCKET = "/var/run/docker.sock"


class Unanswered(Exception):
    """The call did not get a usable answer here; ask through the SDK instead."""


class LoadFailed(Exception):
    """The daemon took the archive and reported an error while loading it (in the JSON-lines answer)."""


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
        super().__init__("localhost", timeout=timeout, blocksize=1 << 20)  # a load's body is sent in 1 MiB reads
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
    """Requests to the daemon; one short connection each (a local connect costs microseconds,
    and no connection is shared between threads)."""

    def __init__(self, path: str, timeout: float = 300.0) -> None:
        self.path = path
        self.timeout = timeout

    def get(self, url: str, query: dict[str, Any] | None = None, *, missing_ok: bool = False) -> Any:
        """The decoded JSON answer; None for 404 when `missing_ok`; Unanswered otherwise."""
        status, body = self._request("GET", url, query)
        if status == 404 and missing_ok:
            return None
        if not 200 <= status < 300:
            raise Unanswered(f"{status} {body[:200]!r}")
        try:
            return json.loads(body) if body.strip() else None
        except ValueError as exc:
            raise Unanswered(f"not JSON: {exc}") from exc

    def _request(
        self, method: str, url: str, query: dict[str, Any] | None = None, body: IO[bytes] | None = None
    ) -> tuple[int, bytes]:
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/x-tar"
            start = body.tell()
            headers["Content-Length"] = str(body.seek(0, os.SEEK_END) - start)
            body.seek(start)
        conn = _UnixConnection(self.path, self.timeout)
        try:
            conn.request(method, url, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise Unanswered(str(exc)) from exc
        finally:
            conn.close()

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
        found = self.get(f"/images/{_quoted(ref)}/json", missing_ok=True)
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

    def tag(self, image: str, repo: str, tag: str) -> None:
        status, body = self._request("POST", f"/images/{_quoted(image)}/tag", {"repo": repo, "tag": tag})
        if status != 201:
            raise Unanswered(f"{status} {body[:200]!r}")

    def untag(self, ref: str) -> None:
        """Remove the name `ref` (`docker rmi --no-prune`); a name that is not there is already removed."""
        status, body = self._request("DELETE", f"/images/{_quoted(ref)}", {"noprune": "1"})
        if status not in (200, 404):
            raise Unanswered(f"{status} {body[:200]!r}")

    def load(self, archive: IO[bytes]) -> list[str]:
        """`docker load` of a seekable tar, sent from where it stands; the daemon's messages (`Loaded image: ...`).

        Unanswered leaves `archive` where it was, to be sent again; LoadFailed names the daemon's error.
        """
        if not archive.seekable():  # it could not be sent again
            raise Unanswered("the archive is not seekable")
        start = archive.tell()
        try:
            status, body = self._request("POST", "/images/load", {"quiet": "1"}, archive)
        except Unanswered:
            archive.seek(start)
            raise
        if status != 200:
            archive.seek(start)
            raise Unanswered(f"{status} {body[:200]!r}")
        messages = []
        for line in body.splitlines():  # one JSON object a line, as `docker load` reads them
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise LoadFailed(f"unreadable answer {line[:200]!r}") from exc
            if isinstance(item, dict) and item.get("error"):
                raise LoadFailed(str(item["error"]))
            if isinstance(item, dict) and item.get("stream"):
                messages.append(str(item["stream"]).strip())
        return messages

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


def _quoted(ref: str) -> str:
    return urllib.parse.quote(ref, safe="")


def _filters(filters: dict[str, str]) -> str:
    # the engine's filter syntax, as the SDK writes it: {"label": ["k=v"]}
    return json.dumps({k: [v] for k, v in filters.items()})
