"""A real registry (Debian's docker-registry) and real bases in it, for the docker tier.

`RegistryProcess` starts `.ci/start-registry.sh` on a free loopback port and
counts what reached it from its access log. `push_skeleton_bases` loads the
skeleton stand-in for each platform (`imgbuild skeleton`'s code), pushes it
with `docker push`, and joins the platforms into one index with
`docker buildx imagetools create`, so the bases are made by other tools than
the code under test.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support import needs

REPO_ROOT = Path(__file__).resolve().parents[2]
START = REPO_ROOT / ".ci" / "start-registry.sh"
DOCKER = os.environ.get("IMGBUILD_DOCKER", "docker")
# what a client asking a registry for a manifest by tag accepts (without the docker ones, distribution converts a
# docker manifest to schema 1, of another digest)
ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<uri>\S+) HTTP/[0-9.]+" (?P<status>\d{3}) ')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RegistryProcess:
    dir: Path
    port: int
    pid: int

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, directory: Path, htpasswd: Path | None = None) -> RegistryProcess:
        needs.tool("docker-registry", "docker", "the loopback registry that publish and lock tests push to")
        for _ in range(5):
            port = free_port()
            args = ["bash", str(START), str(port), str(directory), *([str(htpasswd)] if htpasswd else [])]
            proc = subprocess.run(args, capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                return cls(directory, port, int(proc.stdout.strip().splitlines()[-1]))
            if "already answers" not in proc.stderr:
                raise RuntimeError(f"start-registry.sh failed: {proc.stderr[-1000:]}")
        raise RuntimeError("no free port for the registry")

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            if _zombie(self.pid):
                return
            time.sleep(0.1)

    def log_mark(self) -> int:
        log = self.dir / "registry.log"
        return log.stat().st_size if log.exists() else 0

    def requests_since(self, mark: int) -> list[tuple[str, str, int]]:
        """(method, uri, status) of every request logged after `mark`."""
        with (self.dir / "registry.log").open("rb") as fh:
            fh.seek(mark)
            text = fh.read().decode(errors="replace")
        return [(m["method"], m["uri"], int(m["status"])) for m in ACCESS.finditer(text)]


def _zombie(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return any(line.startswith("State:") and line.split()[1] in ("Z", "X") for line in status.splitlines())


def uploads(requests: Sequence[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """Requests that write: blob upload bodies and manifests (mount POSTs are not uploads)."""
    return [
        r
        for r in requests
        if (r[0] in ("PUT", "PATCH") and "/blobs/uploads/" in r[1]) or (r[0] == "PUT" and "/manifests/" in r[1])
    ]


def docker(*args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([DOCKER, *args], capture_output=True, text=True, check=False, env=env)
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return proc


def push_skeleton_bases(project_root: Path, registry: str, name: str, tag: str, cache: Path) -> str:
    """Skeleton bases for amd64 and arm64 in `registry/name`, joined under `tag`; returns the ref."""
    from imgbuild.builder.bases import pin_repos, skeleton_spec
    from imgbuild.builder.skeleton import ensure_skeleton
    from imgbuild.engine import Engine
    from imgbuild.platforms import Platform
    from imgbuild.project import Project

    project = Project.load(project_root)
    engine = Engine.connect()
    refs = []
    for platform in ("linux/amd64", "linux/arm64"):
        spec = skeleton_spec(project, None, Platform.parse(platform))
        info = ensure_skeleton(engine, spec, pin_repos(project), cache)
        ref = f"{registry}/{name}:{tag}-{spec.arch}"
        engine.tag(info.id, ref)
        docker("push", ref)
        refs.append(ref)
    index = f"{registry}/{name}:{tag}"
    docker("buildx", "imagetools", "create", "-t", index, *refs)
    return index


def set_platforms(project_root: Path, platforms: Sequence[str], base: str | None = None) -> None:
    path = project_root / "images" / "latest.yaml"
    data = yaml.safe_load(path.read_text())
    data["image"]["platforms"] = list(platforms)
    if base is not None:
        data["image"]["base"] = base
    path.write_text(yaml.safe_dump(data))


def remove_images(prefix: str) -> None:
    """Untag every local image reference under `prefix` (e.g. a test registry's host)."""
    out = docker("images", "--digests", "--format", "{{.Repository}}|{{.Tag}}|{{.Digest}}", check=False).stdout
    refs = set()
    for line in out.splitlines():
        repo, tag, digest = [*line.split("|"), "", ""][:3]
        if not repo.startswith(prefix):
            continue
        if tag and tag != "<none>":
            refs.add(f"{repo}:{tag}")
        if digest and digest != "<none>":
            refs.add(f"{repo}@{digest}")
    for ref in sorted(refs):
        docker("rmi", "--no-prune", ref, check=False)
