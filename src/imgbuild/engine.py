"""Every docker call: the docker SDK for the engine, the buildx CLI for builds (Docker 26+, containerd image
store, so an image id is its manifest digest). IMGBUILD_ECHO=1 echoes each as the docker command it amounts to."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shlex
import signal
import tarfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import docker.errors
import requests
from docker.utils import parse_repository_tag

from imgbuild import offline, proc
from imgbuild.errors import DockerError
from imgbuild.owner import OWNER_LABEL, Owner
from imgbuild.platforms import Platform
from imgbuild.proc import echo

START_HINT = (
    "start the daemon: `sudo .ci/setup-host.sh` (installs and starts dockerd), or `sudo dockerd &`, "
    "or `sudo systemctl start docker`; set DOCKER_HOST if it listens elsewhere"
)
ENGINE_HINT = (
    "imgbuild needs Docker 26+ with the containerd image store: `sudo .ci/setup-host.sh` installs it, or set "
    '{"features":{"containerd-snapshotter":true}} in /etc/docker/daemon.json and restart dockerd'
)
BINFMT_FIX = (
    "install and enable emulation: `sudo apt-get install qemu-user-static binfmt-support && "
    "sudo update-binfmts --enable qemu-{qemu}` (or run .ci/setup-host.sh)"
)
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"
MIN_VERSION = (26, 0)
RACED = re.compile(r'image "[^"]+": already exists')  # two builds named one new image at once: Engine.build


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
    last_tagged: str = ""  # when the engine last wrote a tag of this image (any tag: a moved one too)

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
            last_tagged=str((attrs.get("Metadata") or {}).get("LastTagTime") or ""),
        )

    @property
    def platform(self) -> Platform:
        return Platform.of(self.os, self.arch, self.variant)

    @property
    def registry_digest(self) -> str | None:
        """The manifest digest of the image in a registry it came from; None for a local build."""
        return self.repo_digests[0].split("@", 1)[1] if self.repo_digests else None


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


def engine_problem(version: str, driver_status: Sequence[Any]) -> str | None:
    """Why this engine cannot build imgbuild's images (None: it can)."""
    store = any(isinstance(row, list | tuple) and len(row) == 2 and row[1] == CONTAINERD_SNAPSHOTTER
                for row in driver_status)  # fmt: skip
    problems = []
    m = re.match(r"v?(\d+)\.(\d+)", version.strip())  # e.g. 26.1.5+dfsg1
    if not m or (int(m[1]), int(m[2])) < MIN_VERSION:
        problems.append(f"docker {version or '(unknown version)'}")
    if not store:
        problems.append("the classic image store")
    return f"this engine has {' and '.join(problems)}" if problems else None


def _daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def check_binfmt(platform: Platform, daemon: Platform, root: Path = Path("/proc/sys/fs/binfmt_misc")) -> None:
    """Refuse early when a `platform` container cannot run on this daemon (local daemons only)."""
    if platform.arch == daemon.arch or not _daemon_address().startswith("unix://"):
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


SdkErrors = (docker.errors.DockerException, requests.exceptions.RequestException)
LOST = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)  # the daemon went away


class Engine:
    def __init__(self, client: docker.DockerClient, cli: str) -> None:
        self.client = client
        self.cli = cli
        self._arch: Platform | None = None
        self._kept: dict[str, ImageInfo | None] | None = None  # reads_kept: ref or id -> what `image` found

    @classmethod
    def connect(cls) -> Engine:
        """The local engine, checked: reachable, Docker 26+, containerd image store."""
        try:
            echo(["docker", "version", "--format", "{{.Server.APIVersion}}"])  # the SDK's API version handshake
            client = docker.from_env(version="auto", timeout=300)
            echo(["docker", "version"])
            version = client.version()
            echo(["docker", "info"])
            info = client.info()
        except SdkErrors as exc:
            raise DockerError(
                f"cannot reach the Docker daemon at {_daemon_address()}: {_short(exc)}", hint=START_HINT
            ) from exc
        problem = engine_problem(str(version.get("Version", "")), info.get("DriverStatus") or [])
        if problem:
            raise DockerError(problem, hint=ENGINE_HINT)
        engine = cls(client, os.environ.get("IMGBUILD_DOCKER", "docker"))
        engine._arch = _daemon_platform(info)
        engine.remove_leftovers()
        return engine

    @property
    def arch(self) -> Platform:
        """The daemon's own platform."""
        if self._arch is None:
            echo(["docker", "info"])
            info = self._call(self.client.info)
            self._arch = _daemon_platform(info)
        return self._arch

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except docker.errors.NotFound:
            raise
        except SdkErrors as exc:
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> DockerError:
        """The DockerError for a failed SDK call: a daemon that went away (it may end a response early, not
        only refuse the connection), or what the daemon said."""
        if isinstance(exc, LOST) or not self._answers():
            return DockerError(f"lost the Docker daemon at {_daemon_address()}: {_short(exc)}", hint=START_HINT)
        return DockerError(f"docker: {_short(exc)}")

    def _answers(self) -> bool:
        try:
            echo(["docker", "version"])  # the engine's /_ping: does it still answer
            self.client.ping()
        except SdkErrors:
            return False
        return True

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

    # -- images -----------------------------------------------------------
    @contextlib.contextmanager
    def reads_kept(self) -> Iterator[None]:
        """Within, each image lookup (`image`, `require`) asks the engine once: the answer is kept under the ref
        asked and the id found until this engine writes (tag, untag, build, pull) or makes a container, which drops
        every kept answer. What is kept so spans reads alone, with no step of this run between them that could move
        a tag (`builder.runner.build`: a build with nothing to do asks about each image once)."""
        self._kept = {}
        try:
            yield
        finally:
            self._kept = None

    def _forget(self) -> None:
        """A write or a container: what reads_kept kept may be stale now."""
        if self._kept is not None:
            self._kept = {}

    def image(self, ref: str) -> ImageInfo | None:
        kept = self._kept  # this dict, even if a write (another thread's build) replaces it meanwhile
        if kept is not None and ref in kept:
            return kept[ref]
        echo(["docker", "image", "inspect", ref])
        try:
            info: ImageInfo | None = ImageInfo.from_attrs(self._call(self.client.images.get, ref).attrs)
        except docker.errors.NotFound:
            info = None
        if kept is not None:
            kept[ref] = info
            if info is not None:
                kept[info.id] = info
        return info

    def require(self, ref: str) -> ImageInfo:
        info = self.image(ref)
        if info is None:
            raise DockerError(f"no image {ref!r} in the local image store", hint="build it first, or check the name")
        return info

    def labelled(self, key: str, value: str) -> list[ImageInfo]:
        """Every image in the local store whose label `key` is `value`, each inspected (its tags, labels, times)."""
        echo(["docker", "images", "--no-trunc", "--filter", f"label={key}={value}"])
        found = self._call(self.client.api.images, filters={"label": f"{key}={value}"})
        ids = list(dict.fromkeys(str(row["Id"]) for row in found))
        return [info for image_id in ids if (info := self.image(image_id)) is not None]

    def tag(self, image_id: str, ref: str) -> None:
        repo, tag = parse_repository_tag(ref)
        self._forget()
        echo(["docker", "tag", image_id, ref])
        try:
            if not self._call(self.client.api.tag, image_id, repo, tag or "latest", force=True):
                raise DockerError(f"could not tag {image_id} as {ref}")
        finally:
            self._forget()  # before and after: a read another thread made meanwhile is dropped too

    def untag(self, ref: str) -> None:
        self._forget()
        echo(["docker", "rmi", "--no-prune", ref])
        try:
            with contextlib.suppress(docker.errors.NotFound):
                self._call(self.client.api.remove_image, ref, noprune=True)
        finally:
            self._forget()

    def pull(self, ref: str, platform: Platform) -> ImageInfo:
        offline.refuse(
            f"base image {ref} ({platform}) is not in the local image store",
            f"`docker pull --platform {platform} {ref}` (or `docker load` it), or build on `--base skeleton`",
        )
        self._forget()
        echo(["docker", "pull", "--platform", str(platform), ref])
        try:
            self.client.images.pull(ref, platform=str(platform))
            echo(["docker", "image", "inspect", ref])  # the SDK's pull reads the image back
        except SdkErrors as exc:
            raise DockerError(
                f"base image {ref} is not in the local image store, and pulling it for {platform} failed: "
                f"{_short(exc)}",
                hint="load it (`docker load -i FILE`), pull it where a registry is reachable, or build on the offline "
                "stand-in with `--base skeleton`",
            ) from exc
        self._forget()
        return self.require(ref)

    # -- builds -----------------------------------------------------------
    def build(
        self,
        context: bytes | Path,
        *,
        tags: Sequence[str],
        platforms: Sequence[Platform],
        epoch: int,
        no_cache: bool = False,
        verbose: bool = False,
        builder: str | None = None,
        compress: bool = True,
        contexts: Mapping[str, str] | None = None,
    ) -> str:
        """Build `context` (a tar for stdin, or a directory) under `tags` so that equal inputs give equal digests;
        its image id. `compress=False`: the stand-ins' layers, never pushed, where gzip is most of the time.
        `contexts`: named build contexts (`--build-context NAME=SOURCE`, e.g. an `oci-layout://` image)."""
        args = [self.cli, *self._builder_args(builder), "build", "--progress", "plain", "--provenance=false"]
        args += ["--platform", ",".join(str(p) for p in platforms)]
        args += ["--load"] if compress else ["--output", "type=docker,compression=uncompressed,force-compression=true"]
        args += ["--no-cache"] if no_cache else []
        args += [a for t in tags for a in ("--tag", t)]
        args += [a for name, src in sorted((contexts or {}).items()) for a in ("--build-context", f"{name}={src}")]
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        if builder:
            env.pop("BUILDX_BUILDER", None)  # the explicit choice wins
        what = f"docker buildx build for {', '.join(map(str, platforms))} ({', '.join(tags)})"
        source, stdin = (str(context), b"") if isinstance(context, Path) else ("-", context)
        self._forget()
        try:
            self._buildx([*args, source], stdin, env, verbose, what)
        except DockerError as exc:
            # The engine's own race, not ours: BuildKit's image exporter (moby/buildkit exporter/containerimage/
            # export.go, v0.13.2 in Docker 26.1) names an image with `Images.Update`, and with `Images.Create` when
            # Update found no image of that name. Two builds that name one new image at once (two runs of one
            # project, two hosts on one daemon) can both find none; containerd's image store then refuses the
            # second Create: `image "NAME": already exists`. Plain `docker buildx build` does it too (about 1 pair
            # in 3 here; docker/buildx#3576 with buildx 0.30 and Docker 29). Nothing imgbuild can order prevents it
            # (a lock would not reach another host on the daemon), and nothing is lost: the content is stored, only
            # the name was refused. Building again (all of it cached) finds the name and updates it, so it names the
            # image equal inputs give. Not under --verbose: the log goes to the terminal, so the error is not seen
            # here, and the build fails as BuildKit said (a rerun succeeds). tests/faults/test_concurrent.py.
            if not RACED.search(exc.message):
                raise
            self._buildx([*args, source], stdin, env, verbose, what)
        self._forget()
        return self.require(tags[0]).id  # on the containerd store: the manifest (or index) digest

    def _builder_args(self, builder: str | None) -> list[str]:
        """`buildx --builder NAME`, or `--context NAME buildx` when NAME is a docker context (buildx refuses a
        docker context as `--builder`; the CLI's `--context` selects its docker-driver builder instead)."""
        if not builder:
            return ["buildx"]
        done = self._cli([self.cli, "context", "inspect", builder], text=True)
        return ["--context", builder, "buildx"] if done.returncode == 0 else ["buildx", "--builder", builder]

    def _cli(self, argv: list[str], **kwargs: Any) -> proc.CompletedProcess[Any]:
        """`argv` (the docker CLI and its arguments) run through proc.run."""
        try:
            return proc.run(argv, **kwargs)
        except proc.ToolNotFound as exc:
            raise DockerError(
                f"docker CLI {self.cli!r} not found", hint="install docker.io, or set IMGBUILD_DOCKER"
            ) from exc

    def _buildx(self, args: list[str], stdin: bytes, env: dict[str, str], verbose: bool, what: str) -> None:
        """Run buildx to the end (proc.run kills it on an interrupt); a DockerError says why it failed."""
        done = self._cli(args, input=stdin, env=env, capture=not verbose)  # --verbose: its log on the terminal
        if done.returncode == 0:
            return
        text = ((done.stdout or b"") + (done.stderr or b"")).decode(errors="replace")
        if "is not a docker command" in text or "unknown command" in text:
            raise DockerError(
                f"`{self.cli} buildx` is not available: {_tail(text, 3)}",
                hint="install the buildx CLI plugin into ~/.docker/cli-plugins (`.ci/setup-host.sh` does it)",
            )
        try:
            echo(["docker", "version"])  # the engine's /_ping: does it still answer
            self.client.ping()
        except SdkErrors:
            raise DockerError(
                f"the Docker daemon stopped answering during {what}:\n{_tail(text, 8)}",
                hint="it may have crashed: its log (`journalctl -u docker`, or /var/log/dockerd.log) says why; "
                + START_HINT,
            ) from None
        raise DockerError(
            f"{what} failed:\n{_tail(text)}",
            hint="run with IMGBUILD_ECHO=1 to see the command; `--verbose` shows the build log",
        )

    # -- containers -------------------------------------------------------
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
                return RunResult(-1, "", _short(exc))
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


def _daemon_platform(info: Mapping[str, Any]) -> Platform:
    """The daemon's platform from `docker info` (its machine name, e.g. x86_64): one of KNOWN, else a UsageError."""
    return Platform.parse(f"linux/{Platform.arch_of_machine(str(info.get('Architecture', '')))}")
