"""Containers: `run` (`docker run --rm`), files read from an image without starting it (`file_digests`,
`archive`), each container labelled with its maker (owner.py) and removed after; `remove_leftovers` removes those
a killed imgbuild left; `check_binfmt` refuses a platform this daemon cannot run before any container is made."""

from __future__ import annotations

import contextlib
import hashlib
import io
import shlex
import signal
import tarfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import docker.errors

from imgbuild.engine.client import Client, SdkErrors, daemon_address, short
from imgbuild.errors import DockerError
from imgbuild.owner import OWNER_LABEL, Owner
from imgbuild.platforms import Platform
from imgbuild.proc import echo

BINFMT_FIX = (
    "install and enable emulation: `sudo apt-get install qemu-user-static binfmt-support && "
    "sudo update-binfmts --enable qemu-{qemu}` (or run .ci/setup-host.sh)"
)


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


def check_binfmt(platform: Platform, daemon: Platform, root: Path = Path("/proc/sys/fs/binfmt_misc")) -> None:
    """Refuse early when a `platform` container cannot run on this daemon (local daemons only)."""
    if platform.arch == daemon.arch or not daemon_address().startswith("unix://"):
        return  # the same arch, or a remote daemon: `exec format error` is caught when running instead
    entry = root / f"qemu-{platform.machine}"
    try:
        enabled = entry.read_text().splitlines()[0].strip() == "enabled"
    except (OSError, IndexError):
        enabled = False
    if not enabled:
        raise DockerError(
            f"cannot run {platform} containers on this {daemon} host: binfmt_misc has no enabled "
            f"{entry.name} entry ({entry})",
            hint=BINFMT_FIX.format(qemu=platform.machine),
        )


class Containers(Client):
    """The client, and containers: each labelled with this process, removed after."""

    def remove_leftovers(self) -> None:
        """Remove containers an imgbuild created and could not remove itself (it was killed): only those whose
        maker is certainly of this boot and pid namespace and certainly dead (`Owner.is_dead_here`). Another host's,
        another pid namespace's, an old label's or a live process's containers stay."""
        here = Owner.of_this_process()
        with contextlib.suppress(*SdkErrors):
            echo(["docker", "ps", "--all", "--filter", f"label={OWNER_LABEL}"])
            for c in self.client.api.containers(all=True, filters={"label": OWNER_LABEL}):
                owner = Owner.parse((c.get("Labels") or {}).get(OWNER_LABEL, ""))
                if owner is not None and owner.is_dead_here(here):
                    echo(["docker", "rm", "--force", c["Id"]])
                    with contextlib.suppress(docker.errors.NotFound):  # another run removed it first
                        self.client.api.remove_container(c["Id"], force=True)

    @contextlib.contextmanager
    def _container(self, ref: str, *, echo_rm: bool = False, **kwargs: Any) -> Iterator[str]:
        """A container of `ref` labelled with this process (remove_leftovers' mark), removed after (`echo_rm`: the
        removal echoed as `docker rm`; a `docker run --rm` echoes none)."""
        api = self.client.api
        cid = None
        self._forget()
        try:
            with held_interrupts():  # a Ctrl-C now would lose the id of a container the daemon made
                labels = {OWNER_LABEL: Owner.of_this_process().label()}
                cid = self._call(api.create_container, ref, labels=labels, **kwargs)["Id"]
            yield cid
        finally:
            with held_interrupts(), contextlib.suppress(*SdkErrors):
                if cid is not None:
                    if echo_rm:
                        echo(["docker", "rm", "--force", cid[:12]])
                    api.remove_container(cid, force=True)

    def file_digests(self, ref: str, paths: Sequence[str], platform: Platform | None = None) -> dict[str, str | None]:
        """The sha256 of each absolute path in the image (None: missing or not a regular file); the container
        is never started, so no emulation is needed."""
        echo(["docker", "create", *(["--platform", str(platform)] if platform else []), ref, "imgbuild-read-only"])
        plat = str(platform) if platform else None
        with self._container(ref, echo_rm=True, command=["imgbuild-read-only"], platform=plat) as cid:
            return {path: self._sha256(cid, path) for path in paths}

    def archive(self, ref: str, path: str, platform: Platform | None = None) -> bytes | None:
        """A tar of `path` (a file or a directory, recursively) in the image, or None if it is missing; the
        container is never started."""
        echo(["docker", "create", *(["--platform", str(platform)] if platform else []), ref, "imgbuild-read-only"])
        plat = str(platform) if platform else None
        with self._container(ref, echo_rm=True, command=["imgbuild-read-only"], platform=plat) as cid:
            echo(["docker", "cp", f"{cid[:12]}:{path}", "-"])
            try:
                stream, _ = self._call(self.client.api.get_archive, cid, path)
            except docker.errors.NotFound:
                return None
            return b"".join(stream)

    def _sha256(self, cid: str, path: str) -> str | None:
        echo(["docker", "cp", f"{cid[:12]}:{path}", "-"])
        try:
            stream, _ = self._call(self.client.api.get_archive, cid, path)
        except docker.errors.NotFound:
            return None
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    fh = tar.extractfile(member)
                    return hashlib.sha256(fh.read()).hexdigest() if fh else None
        return None

    def run(
        self,
        ref: str,
        argv: Sequence[str],
        *,
        platform: Platform | None = None,
        timeout: int = 600,
        entrypoint: Sequence[str] | None = None,
        binds: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> RunResult:
        """`docker run --rm IMAGE ARGV...`; the image's own entrypoint applies unless `entrypoint` is given.
        `files` (absolute path -> bytes) are put into the container before it starts (`docker cp`: no bind
        mount, so a daemon that does not share this machine's filesystem gets them too)."""
        opts = ["--platform", str(platform)] if platform else []
        opts += ["--entrypoint", shlex.join(entrypoint)] if entrypoint is not None else []
        opts += [a for b in binds for a in ("-v", b)]
        opts += [a for k, v in sorted((environment or {}).items()) for a in ("-e", f"{k}={v}")]
        echo(["docker", "run", "--rm", *opts, ref, *argv])
        api = self.client.api
        with self._container(
            ref,
            command=list(argv),
            platform=str(platform) if platform else None,
            entrypoint=list(entrypoint) if entrypoint is not None else None,
            environment=dict(environment) if environment else None,
            host_config=api.create_host_config(binds=list(binds)) if binds else None,
        ) as cid:
            if files:
                echo(["docker", "cp", "-", f"{cid[:12]}:/"])
                self._call(api.put_archive, cid, "/", _tar(files))
            try:
                api.start(cid)
            except docker.errors.APIError as exc:  # e.g. the entrypoint does not exist in the image
                return RunResult(-1, "", short(exc))
            except SdkErrors as exc:  # the daemon went away
                raise self._error(exc) from exc
            try:
                status = self._call(api.wait, cid, timeout=timeout)
                code, timed_out = int(status.get("StatusCode", -1)), False
            except DockerError as exc:
                if "timed out" not in exc.message.lower():
                    raise
                echo(["docker", "kill", cid[:12]])
                self._call(api.kill, cid)
                code, timed_out = -1, True
            stdout = self._call(api.logs, cid, stdout=True, stderr=False).decode(errors="replace")
            stderr = self._call(api.logs, cid, stdout=False, stderr=True).decode(errors="replace")
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


def _tar(files: Mapping[str, bytes]) -> bytes:
    """A tar of `files` (absolute path -> bytes) and their parent directories, to extract at /."""
    buf = io.BytesIO()
    dirs = sorted({str(p) for path in files for p in PurePosixPath(path.lstrip("/")).parents[:-1]})
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mode, info.size = 0o644, len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
