"""A failed buildx call says whether the daemon is still there (a crashed dockerd is not a build error)."""

from __future__ import annotations

import http.server
import os
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from imgbuild.engine import Engine
from imgbuild.errors import DockerError

WHAT = "docker buildx build for linux/arm64 (x:1)"
LAST_LINE = "ERROR: failed to receive status: rpc error: code = Unavailable desc = error reading from server: EOF"


class _Ping(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args: object) -> None:
        pass


class _UnixHttp(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[object, tuple[str, int]]:
        conn, _ = self.socket.accept()
        return conn, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port)


@pytest.fixture
def answering(tmp_path: Path) -> Iterator[str]:
    """A unix socket that answers /_ping as a daemon does."""
    path = str(tmp_path / "ping.sock")
    server = _UnixHttp(path, _Ping)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield path
    server.shutdown()
    server.server_close()


def failing_cli(tmp_path: Path) -> str:
    """A docker CLI whose buildx is installed but whose every build fails as one does when dockerd dies."""
    cli = tmp_path / "docker"
    cli.write_text(f'#!/bin/sh\n[ "$1 $2" = "buildx version" ] && exit 0\necho "{LAST_LINE}"\nexit 1\n')
    cli.chmod(0o755)
    return str(cli)


def build(engine: Engine, cli: str, monkeypatch: pytest.MonkeyPatch) -> DockerError:
    monkeypatch.setenv("IMGBUILD_DOCKER", cli)  # the docker CLI the engine's door runs
    with pytest.raises(DockerError) as err:
        engine._buildx(["buildx", "build", "-"], b"", dict(os.environ), False, WHAT)
    return err.value


def test_a_failed_build_on_a_daemon_that_is_gone_says_it_stopped_and_where_its_log_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = docker.DockerClient(base_url=f"unix://{tmp_path / 'gone.sock'}", version="1.45")
    err = build(Engine(client), failing_cli(tmp_path), monkeypatch)
    assert err.message.startswith(f"the Docker daemon stopped answering during {WHAT}:\n"), err.message
    assert LAST_LINE in err.message
    assert err.hint is not None and "/var/log/dockerd.log" in err.hint and "journalctl -u docker" in err.hint


def test_a_failed_build_on_a_daemon_that_answers_is_a_build_failure(
    tmp_path: Path, answering: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = docker.DockerClient(base_url=f"unix://{answering}", version="1.45")
    err = build(Engine(client), failing_cli(tmp_path), monkeypatch)
    assert err.message.startswith(f"{WHAT} failed:\n") and LAST_LINE in err.message, err.message
    assert "stopped answering" not in err.message
