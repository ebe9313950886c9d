"""Every docker call goes through this module.

Builds run through BuildKit with the `docker buildx build` CLI (the docker
driver, `--load`, one `--platform` per build, the context tar on stdin).
Everything else (inspect, tag, run, read files, load, pull) goes through the
docker SDK. With IMGBUILD_ECHO=1 each operation is echoed as the docker
command it amounts to. Failures become DockerError with a hint.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform as host_platform
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
import requests

from imgbuild.errors import DockerError

START_HINT = (
    "start the daemon: `sudo .ci/setup-host.sh` (installs and starts dockerd), or `sudo dockerd &`, "
    "or `sudo systemctl start docker`; set DOCKER_HOST if it listens elsewhere"
)
BINFMT_FIX = (
    "install and enable emulation: `sudo apt-get install qemu-user-static binfmt-support && "
    "sudo update-binfmts --enable qemu-{qemu}` (or run .ci/setup-host.sh)"
)
CONTAINER_LABEL = "imgbuild.container-of"  # on every container imgbuild creates: the pid that created it
ARCH_NAMES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
QEMU_NAMES = {"arm64": "aarch64", "amd64": "x86_64"}


def echo(args: Iterable[str]) -> None:
    if os.environ.get("IMGBUILD_ECHO"):
        print("+ " + shlex.join(args), file=sys.stderr)


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    os: str
    arch: str
    variant: str
    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None
    env: tuple[str, ...]
    labels: dict[str, str]
    layers: tuple[str, ...]
    size: int

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> ImageInfo:
        cfg = attrs.get("Config") or {}
        ep, cmd = cfg.get("Entrypoint"), cfg.get("Cmd")
        return cls(
            id=str(attrs["Id"]),
            tags=tuple(attrs.get("RepoTags") or ()),
            repo_digests=tuple(attrs.get("RepoDigests") or ()),
            os=str(attrs.get("Os", "")),
            arch=str(attrs.get("Architecture", "")),
            variant=str(attrs.get("Variant", "") or ""),
            entrypoint=None if ep is None else tuple(ep),
            cmd=None if cmd is None else tuple(cmd),
            env=tuple(cfg.get("Env") or ()),
            labels=dict(cfg.get("Labels") or {}),
            layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
            size=int(attrs.get("Size") or 0),
        )

    @property
    def platform(self) -> str:
        return f"{self.os}/{self.arch}"

    @property
    def digest(self) -> str:
        """The repo digest when the image came from a registry, else the image id."""
        return self.repo_digests[0].split("@", 1)[1] if self.repo_digests else self.id


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


def _daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def host_arch(name: str | None = None) -> str:
    machine = name or host_platform.machine()
    return ARCH_NAMES.get(machine, machine)


def check_binfmt(arch: str, daemon_arch: str, root: Path = Path("/proc/sys/fs/binfmt_misc")) -> None:
    """Refuse early when an `arch` container cannot run on this daemon (local daemons only)."""
    if arch == daemon_arch:
        return
    qemu = QEMU_NAMES.get(arch, arch)
    if not _daemon_address().startswith("unix://"):
        return  # a remote daemon: `exec format error` is caught when running instead
    entry = root / f"qemu-{qemu}"
    try:
        enabled = entry.read_text().splitlines()[0].strip() == "enabled"
    except (OSError, IndexError):
        enabled = False
    if not enabled:
        raise DockerError(
            f"cannot run linux/{arch} containers on this linux/{daemon_arch} host: binfmt_misc has no enabled "
            f"{entry.name} entry ({entry})",
            hint=BINFMT_FIX.format(qemu=qemu),
        )


class Engine:
    def __init__(self, client: docker.DockerClient, cli: str) -> None:
        self.client = client
        self.cli = cli
        self._buildx_checked = False
        self._arch: str | None = None

    @classmethod
    def connect(cls) -> Engine:
        try:
            client = docker.from_env(version="auto", timeout=300)
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise DockerError(
                f"cannot reach the Docker daemon at {_daemon_address()}: {_short(exc)}", hint=START_HINT
            ) from exc
        engine = cls(client, os.environ.get("IMGBUILD_DOCKER", "docker"))
        engine.remove_leftovers()
        return engine

    def remove_leftovers(self) -> list[str]:
        """Remove containers an imgbuild created and could not remove itself (it was killed)."""
        removed = []
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            for c in self.client.api.containers(all=True, filters={"label": CONTAINER_LABEL}):
                owner = (c.get("Labels") or {}).get(CONTAINER_LABEL, "")
                if owner.isdigit() and _alive(int(owner)):
                    continue
                self.client.api.remove_container(c["Id"], force=True)
                removed.append(str(c["Id"]))
        return removed

    @property
    def arch(self) -> str:
        """The daemon's own architecture, as a docker platform arch name."""
        if self._arch is None:
            self._arch = host_arch(str(self._call(self.client.info).get("Architecture", "")))
        return self._arch

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except docker.errors.NotFound:
            raise
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if isinstance(exc, requests.exceptions.ConnectionError):
                raise DockerError(
                    f"lost the Docker daemon at {_daemon_address()}: {_short(exc)}", hint=START_HINT
                ) from exc
            raise DockerError(f"docker: {_short(exc)}") from exc

    # -- images -----------------------------------------------------------
    def image(self, ref: str) -> ImageInfo | None:
        try:
            img = self._call(self.client.images.get, ref)
        except docker.errors.NotFound:
            return None
        return ImageInfo.from_attrs(img.attrs)

    def require(self, ref: str) -> ImageInfo:
        info = self.image(ref)
        if info is None:
            raise DockerError(f"no image {ref!r} in the local image store", hint="build it first, or check the name")
        return info

    def tag(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        if not repo or "/" in tag:
            repo, tag = ref, "latest"
        echo(["docker", "tag", image_id, ref])
        if not self._call(self.client.api.tag, image_id, repo, tag, force=True):
            raise DockerError(f"could not tag {image_id} as {ref}")

    def untag(self, ref: str) -> None:
        echo(["docker", "rmi", "--no-prune", ref])
        with contextlib.suppress(docker.errors.NotFound):
            self._call(self.client.api.remove_image, ref, noprune=True)

    def remove(self, image_id: str) -> None:
        """Remove an image and all its tags (for tests and cleanups)."""
        echo(["docker", "rmi", "-f", image_id])
        with contextlib.suppress(docker.errors.NotFound):
            self._call(self.client.api.remove_image, image_id, force=True)

    def pull(self, ref: str, platform: str) -> ImageInfo:
        echo(["docker", "pull", "--platform", platform, ref])
        try:
            self.client.images.pull(ref, platform=platform)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise DockerError(
                f"base image {ref} is not in the local image store, and pulling it for {platform} failed: "
                f"{_short(exc)}",
                hint="load it (`docker load -i FILE`), pull it where a registry is reachable, or build on the offline "
                "stand-in with `--base skeleton`",
            ) from exc
        return self.require(ref)

    def load(self, archive: IO[bytes]) -> None:
        echo(["docker", "load"])
        try:
            self.client.images.load(archive)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise DockerError(f"docker load failed: {_short(exc)}") from exc

    # -- builds -----------------------------------------------------------
    def _check_buildx(self) -> None:
        if self._buildx_checked:
            return
        try:
            proc = subprocess.run([self.cli, "buildx", "version"], capture_output=True, text=True, check=False)
        except FileNotFoundError as exc:
            raise DockerError(
                f"docker CLI {self.cli!r} not found", hint="install docker.io, or set IMGBUILD_DOCKER"
            ) from exc
        if proc.returncode != 0:
            raise DockerError(
                f"`{self.cli} buildx` is not available: {proc.stderr.strip()[-300:]}",
                hint="install the buildx CLI plugin into ~/.docker/cli-plugins (`.ci/setup-host.sh` does it)",
            )
        self._buildx_checked = True

    def build(
        self,
        context: bytes,
        *,
        tags: Sequence[str],
        platform: str,
        no_cache: bool = False,
        verbose: bool = False,
    ) -> str:
        """`docker buildx build --load` of a context tar; returns the image id."""
        self._check_buildx()
        with tempfile.TemporaryDirectory(prefix="imgbuild-build-") as tmp:
            iid = Path(tmp) / "iid"
            args = [self.cli, "buildx", "build", "--platform", platform, "--load", "--progress", "plain"]
            args += ["--iidfile", str(iid)]
            for t in tags:
                args += ["--tag", t]
            if no_cache:
                args.append("--no-cache")
            args.append("-")
            echo(args)
            proc = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=None if verbose else subprocess.PIPE,
                stderr=None if verbose else subprocess.STDOUT,
            )
            try:
                out, _ = proc.communicate(context)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            if proc.returncode != 0:
                text = (out or b"").decode(errors="replace")
                raise DockerError(
                    f"docker buildx build for {platform} ({', '.join(tags)}) failed:\n{_tail(text)}",
                    hint="run with IMGBUILD_ECHO=1 to see the command; `--verbose` shows the build log",
                )
            image_id = iid.read_text().strip() if iid.exists() else ""
        if not image_id.startswith("sha256:"):
            info = self.image(tags[0]) if tags else None
            if info is None:
                raise DockerError(f"buildx finished but left no image for {', '.join(tags)}")
            image_id = info.id
        return image_id

    # -- containers -------------------------------------------------------
    def read_files(self, ref: str, paths: Sequence[str], platform: str | None = None) -> dict[str, bytes | None]:
        """The bytes of each absolute path in the image (None: missing or not a regular file).

        The container is created, never started, so no emulation is needed.
        """
        echo(["docker", "create", ref, "&&", "docker", "cp", "...", *paths[:3], "..." if len(paths) > 3 else ""])
        api = self.client.api
        cid = None
        try:
            with held_interrupts():  # a Ctrl-C now would lose the id of a container the daemon made
                cid = self._call(
                    api.create_container, ref, command=["imgbuild-read-only"], platform=platform, labels=_owner()
                )["Id"]
            out: dict[str, bytes | None] = {}
            for path in paths:
                out[path] = self._read_one(cid, path)
            return out
        finally:
            if cid is not None:
                with held_interrupts():
                    self._call(api.remove_container, cid, force=True)

    def _read_one(self, cid: str, path: str) -> bytes | None:
        try:
            stream, _ = self._call(self.client.api.get_archive, cid, path)
        except docker.errors.NotFound:
            return None
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    fh = tar.extractfile(member)
                    return fh.read() if fh else None
        return None

    def run(
        self,
        ref: str,
        argv: Sequence[str],
        *,
        platform: str | None = None,
        timeout: int = 600,
        entrypoint: Sequence[str] | None = None,
    ) -> RunResult:
        """`docker run --rm IMAGE ARGV...`; the image's own entrypoint applies unless `entrypoint` is given."""
        opts = ["--platform", platform] if platform else []
        opts += ["--entrypoint", shlex.join(entrypoint)] if entrypoint is not None else []
        echo(["docker", "run", "--rm", *opts, ref, *argv])
        api = self.client.api
        cid = None
        try:
            with held_interrupts():  # a Ctrl-C now would lose the id of a container the daemon made
                cid = self._call(
                    api.create_container,
                    ref,
                    command=list(argv),
                    platform=platform,
                    entrypoint=list(entrypoint) if entrypoint is not None else None,
                    labels=_owner(),
                )["Id"]
            try:
                api.start(cid)
            except docker.errors.APIError as exc:  # e.g. the entrypoint does not exist in the image
                return RunResult(-1, "", _short(exc))
            try:
                status = self._call(api.wait, cid, timeout=timeout)
                code, timed_out = int(status.get("StatusCode", -1)), False
            except DockerError as exc:
                if "timed out" not in exc.message.lower():
                    raise
                self._call(api.kill, cid)
                code, timed_out = -1, True
            stdout = self._call(api.logs, cid, stdout=True, stderr=False).decode(errors="replace")
            stderr = self._call(api.logs, cid, stdout=False, stderr=True).decode(errors="replace")
        finally:
            with (
                held_interrupts(),
                contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException),
            ):
                if cid is not None:
                    api.remove_container(cid, force=True)
        return RunResult(code, stdout, stderr, timed_out)


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back until the block is done; it is delivered right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _owner() -> dict[str, str]:
    return {CONTAINER_LABEL: str(os.getpid())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:400] if text else type(exc).__name__


def _tail(text: str, n: int = 25) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    picked = lines[-n:]
    for ln in errors[-5:]:
        if ln not in picked:
            picked.insert(0, ln)
    return "\n".join(picked)
