"""An sshd on a loopback port whose logins reach a node daemon: a cluster node as sparkrun sees one.

Keys, config, known_hosts and the client's config all live in a temp dir; the
client is the real `ssh`, given that config with `-F` (sparkrun's `ssh.options`).
The config names the node `HOST` (an alias for 127.0.0.1 and the port), so a
launcher takes it for a remote host, not this machine. On the server side
`SetEnv DOCKER_HOST=...` points the login's `docker` at the node daemon, as a
node's own docker socket would be. Started by `.ci/setup-sshd.sh`'s unpacked sshd.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = os.environ.get("IMGBUILD_SSHD", "/opt/imgbuild-sshd/sshd")
PRIVSEP = Path("/run/sshd")  # compiled into Debian's sshd


@dataclass(frozen=True)
class Sshd:
    url: str  # ssh://root@127.0.0.1:PORT
    ssh: Path  # a `ssh` that uses the test's config
    config: Path  # that config: `ssh -F CONFIG HOST` logs in
    host: str  # the node's name in the config


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def sshd_to(root: Path, docker_host: str, host: str = "node1", env: dict[str, str] | None = None) -> Iterator[Sshd]:
    """`env`: more of the login's environment (`SetEnv`), e.g. the node's own cache directories."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
    (root / "authorized_keys").write_text((root / "client.pub").read_text())
    port = _port()
    (root / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        f"SetEnv DOCKER_HOST={docker_host}" + "".join(f" {k}={v}" for k, v in (env or {}).items()) + "\n"
    )
    host_key = (root / "host.pub").read_text().split()[:2]
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_key)}\n")
    (root / "ssh_config").write_text(
        f"Host {host}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
        f"Host *\n  IdentityFile {root / 'client'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {root / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
    )
    ssh = root / "ssh"
    ssh.write_text(f'#!/bin/sh\nexec ssh -F {root / "ssh_config"} "$@"\n')
    ssh.chmod(0o755)
    made_privsep = not PRIVSEP.exists()
    if made_privsep:
        PRIVSEP.mkdir(mode=0o755)
    log = (root / "sshd.log").open("wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {(root / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield Sshd(f"ssh://root@127.0.0.1:{port}", ssh, root / "ssh_config", host)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if made_privsep:
            shutil.rmtree(PRIVSEP, ignore_errors=True)


def cluster_config(path: Path, logins: list[Sshd]) -> Path:
    """One ssh config naming every login's node (each sshd_to writes a config for its own node only), for a cluster
    of several nodes: sparkrun passes it to every ssh it runs, the head's `docker save | ssh WORKER docker load`
    included (the head is this machine, so the file is there too)."""
    blocks = []
    for login in logins:
        port = login.url.rpartition(":")[2]
        keys = login.config.parent
        blocks.append(
            f"Host {login.host}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {keys / 'client'}\n"
            f"  IdentitiesOnly yes\n  UserKnownHostsFile {keys / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        )
    path.write_text("".join(blocks))
    return path
