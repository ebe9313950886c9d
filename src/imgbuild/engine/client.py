"""The engine's client: the docker SDK connected and checked (Docker 26+, the containerd image store, so an
image id is its manifest digest), each SDK call's failure one DockerError, and the image store read and written:
inspect (`reads_kept`), tag, untag, pull. IMGBUILD_ECHO=1 echoes each call as the docker command it amounts to."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import docker
import docker.errors
import requests
from docker.utils import parse_repository_tag

from imgbuild import offline
from imgbuild.errors import DockerError
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
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"
MIN_VERSION = (26, 0)


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


def daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


SdkErrors = (docker.errors.DockerException, requests.exceptions.RequestException)
LOST = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)  # the daemon went away


class Client:
    """The docker SDK client and what the image store holds; `Engine` (engine/engine.py) adds builds and
    containers to it."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self._platform: Platform | None = None
        self._kept: dict[str, ImageInfo | None] | None = None  # reads_kept: ref or id -> what `image` found

    @classmethod
    def connect(cls) -> Self:
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
                f"cannot reach the Docker daemon at {daemon_address()}: {short(exc)}", hint=START_HINT
            ) from exc
        problem = engine_problem(str(version.get("Version", "")), info.get("DriverStatus") or [])
        if problem:
            raise DockerError(problem, hint=ENGINE_HINT)
        engine = cls(client)
        engine._platform = _daemon_platform(info)
        return engine

    @property
    def platform(self) -> Platform:
        """The daemon's own platform."""
        if self._platform is None:
            echo(["docker", "info"])
            info = self._call(self.client.info)
            self._platform = _daemon_platform(info)
        return self._platform

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
        if isinstance(exc, LOST) or not self.answers():
            return DockerError(f"lost the Docker daemon at {daemon_address()}: {short(exc)}", hint=START_HINT)
        return DockerError(f"docker: {short(exc)}")

    def answers(self) -> bool:
        try:
            echo(["docker", "version"])  # the engine's /_ping: does it still answer
            self.client.ping()
        except SdkErrors:
            return False
        return True

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
                f"base image {ref} is not in the local image store, and pulling it for {platform} failed: {short(exc)}",
                hint="load it (`docker load -i FILE`), pull it where a registry is reachable, or build on the offline "
                "stand-in with `--base skeleton`",
            ) from exc
        self._forget()
        return self.require(ref)


def short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:400] if text else type(exc).__name__


def _daemon_platform(info: Mapping[str, Any]) -> Platform:
    """The daemon's platform from `docker info` (its machine name, e.g. x86_64): one of KNOWN, else a UsageError."""
    return Platform.parse(f"linux/{Platform.arch_of_machine(str(info.get('Architecture', '')))}")
