"""Every docker call goes through this module.

The engine's version and image store are read once (`Engine.features`) and
pick the build path:

- Docker 26+ with the containerd image store: layer and variant images are
  written into the OCI layout directory without BuildKit (layerimage.py,
  configimage.py: BuildKit's tars and configs) and `docker load`ed, a
  multi-platform index under the tags plus one tag per platform (Docker 26
  cannot inspect one platform of an index). BuildKit (`docker buildx build`,
  the docker driver, the context tar on stdin) exports each base into the
  layout once, and builds what the writers do not know, through the `oci`
  exporter with `rewrite-timestamp` and SOURCE_DATE_EPOCH, one call per
  platform (one call for several can crash dockerd 26: `_export`), the index
  written here; equal inputs give equal digests either way.
- anything older (Debian's 20.10, BuildKit v0.8): `buildx build --load`, one
  platform per call, digests not reproducible.

Reads (image inspect, image and container lists, version, info) and image
writes (tag, untag, load) go over the local socket with http.client
(engine_api.py) when the daemon is one, so a build that runs no container
never imports the SDK; everything else (run, read files, pull), and any call
that socket does not answer, goes through the docker SDK, loaded on first use.
With IMGBUILD_ECHO=1 each operation is echoed as the docker command it amounts
to. Failures become DockerError with a hint.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import platform as host_platform
import re
import shlex
import signal
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

from imgbuild import lazy as _lazy
from imgbuild import proc
from imgbuild.errors import DockerError
from imgbuild.images import configimage, engine_api, layerimage, ocilayout
from imgbuild.proc import echo
from imgbuild.registry import reference

if TYPE_CHECKING:
    import docker
    import docker.errors
    import requests
else:  # loaded on first use: a no-op build or a check asks the local socket (engine_api) and never needs them
    docker = _lazy.module("docker")
    requests = _lazy.module("requests")

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


def _not_found(cli: str) -> DockerError:
    return DockerError(f"docker CLI {cli!r} not found", hint="install docker.io, or set IMGBUILD_DOCKER")


def context_host(name: str, cli: str = "docker") -> tuple[str, str]:
    """The daemon URL of docker context `name` (`docker context inspect`), with '' and why not where it has none."""
    try:
        done = proc.run([cli, "context", "inspect", name, "--format", "{{.Endpoints.docker.Host}}"], text=True)
    except proc.ToolNotFound as exc:
        raise _not_found(cli) from exc
    host = done.stdout.strip() if done.returncode == 0 else ""
    return host, "" if host else (done.stderr.strip() or "no such context")


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
        return self.registry_digest or self.id

    @property
    def registry_digest(self) -> str | None:
        """The manifest digest of the image in a registry it came from; None for a local build or load."""
        return self.repo_digests[0].split("@", 1)[1] if self.repo_digests else None


@dataclass(frozen=True)
class ConfigPart:
    """One platform of a config-only image: its parent and what the variant Dockerfile sets."""

    parent_ref: str
    platform: str
    env: tuple[tuple[str, str], ...]
    labels: Mapping[str, str]


_Blobs = tuple[configimage.Blob, configimage.Blob, tuple[configimage.Blob, ...]]  # manifest, config, all to store


@dataclass(frozen=True)
class _Made:
    """One platform's image written here: its manifest and config, every blob to store, its platform."""

    manifest: configimage.Blob
    config: configimage.Blob
    blobs: tuple[configimage.Blob, ...]
    platform: Mapping[str, Any]


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"
# rewrite-timestamp needs BuildKit v0.13, which Docker 26 embeds.
OCI_EXPORT_MIN = (26, 0)


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a docker version such as '26.1.5+dfsg1'; (0, 0, 0) if unreadable."""
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else (0, 0, 0)


@dataclass(frozen=True)
class EngineFeatures:
    """What the daemon can do, read once from `docker version` and `docker info`."""

    version: str
    api_version: str
    containerd_store: bool

    @classmethod
    def from_daemon(cls, version: dict[str, Any], info: dict[str, Any]) -> EngineFeatures:
        status = info.get("DriverStatus") or []
        snapshotter = any(
            isinstance(row, list | tuple) and len(row) == 2 and row[1] == CONTAINERD_SNAPSHOTTER for row in status
        )
        return cls(str(version.get("Version", "")), str(version.get("ApiVersion", "")), snapshotter)

    @property
    def modern(self) -> bool:
        """Multi-platform builds in one call, the oci exporter, reproducible digests."""
        return self.containerd_store and parse_version(self.version)[:2] >= OCI_EXPORT_MIN

    def describe(self) -> str:
        store = "containerd image store" if self.containerd_store else "classic image store"
        if self.modern:
            return (
                f"engine: docker {self.version} ({store}): every platform of an image at once, "
                "layers and configs written without BuildKit (reproducible digests)"
            )
        why = "" if self.containerd_store else "; Docker 26+ with the containerd image store builds them in one call"
        return (
            f"engine: docker {self.version} ({store}): one platform per BuildKit call, "
            f"several platforms under -<arch> tags, digests not reproducible{why}"
        )


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


F = TypeVar("F", bound=Callable[..., Any])


def _changes_images(method: F) -> F:
    """An Engine method that changes the image store: what `remembering` kept is dropped, before and after."""

    @functools.wraps(method)
    def wrapper(self: Engine, *args: Any, **kwargs: Any) -> Any:
        self._forget()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._forget()

    return cast(F, wrapper)


@contextlib.contextmanager
def _sdk_errors_suppressed() -> Iterator[None]:
    """contextlib.suppress of the SDK's errors, naming them only when one is raised (no SDK import before)."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, (docker.errors.DockerException, requests.exceptions.RequestException)):
            raise


def _sdk_client() -> docker.DockerClient:
    _lazy.loaded(requests)  # docker runs requests as it loads: that first, under the same lock
    _lazy.loaded(docker)  # smoke workers may make their first clients at once
    try:
        client = docker.from_env(version="auto", timeout=300)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise DockerError(
            f"cannot reach the Docker daemon at {_daemon_address()}: {_short(exc)}", hint=START_HINT
        ) from exc
    return client


class Engine:
    def __init__(self, client: docker.DockerClient | None, cli: str, api: engine_api.EngineApi | None = None) -> None:
        self._client = client
        self._api = api  # the local socket for read-only calls; None: everything through the SDK
        self.cli = cli
        self._buildx_checked = False
        self._arch: str | None = None
        self._features: EngineFeatures | None = None
        self._contexts: dict[str, bool] = {}  # builder name -> is a docker context
        self._memo: dict[str, ImageInfo | None] | None = None  # image() answers, inside `remembering`

    @classmethod
    def connect(cls) -> Engine:
        cli = os.environ.get("IMGBUILD_DOCKER", "docker")
        path = engine_api.local_socket()
        api = engine_api.EngineApi(path) if path is not None else None
        # Answered on the local socket: the SDK client is made when a call needs it. Otherwise (not a
        # local socket, or no answer there) the SDK connects, and words any error as it always has.
        engine = cls(None, cli, api) if api is not None and api.ping() else cls(_sdk_client(), cli)
        engine.remove_leftovers()
        return engine

    def fork(self) -> Engine:
        """An Engine on the same daemon for another thread: its own SDK client (a requests Session is not
        thread-safe) and no memo of this one's; the socket reads open a connection per call, so they are shared."""
        twin = Engine(None, self.cli, self._api)
        twin._arch, twin._features = self._arch, self._features
        return twin

    def close(self) -> None:
        """Close the SDK client's connections, if it made any."""
        if self._client is not None:
            with _sdk_errors_suppressed():
                self._client.close()

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = _sdk_client()
        return self._client

    def _read(self, call: Any, fallback: Any) -> Any:
        """`call(api)` over the local socket, or `fallback()` (the SDK) when there is no socket or no answer."""
        if self._api is not None:
            try:
                return call(self._api)
            except engine_api.Unanswered:
                pass
        return fallback()

    def remove_leftovers(self) -> list[str]:
        """Remove containers an imgbuild created and could not remove itself (it was killed)."""
        removed = []
        with _sdk_errors_suppressed():
            listed = self._read(
                lambda api: api.containers({"label": CONTAINER_LABEL}),
                lambda: self.client.api.containers(all=True, filters={"label": CONTAINER_LABEL}),
            )
            for c in listed:
                owner = (c.get("Labels") or {}).get(CONTAINER_LABEL, "")
                if owner.isdigit() and _alive(int(owner)):
                    continue
                self.client.api.remove_container(c["Id"], force=True)
                removed.append(str(c["Id"]))
        return removed

    def remove_own_containers(self) -> list[str]:
        """Remove the containers this process made and still has (best effort: the daemon may be gone).

        How a build stops the smoke containers its worker threads run: each worker's wait then returns.
        """
        removed = []
        with contextlib.suppress(DockerError), _sdk_errors_suppressed():
            listed = self.client.api.containers(all=True, filters={"label": f"{CONTAINER_LABEL}={os.getpid()}"})
            for c in listed:
                with _sdk_errors_suppressed():  # its own worker may have removed it by now
                    self.client.api.remove_container(c["Id"], force=True)
                    removed.append(str(c["Id"]))
        return removed

    @property
    def arch(self) -> str:
        """The daemon's own architecture, as a docker platform arch name."""
        if self._arch is None:
            info = self._read(lambda api: api.info(), lambda: self._call(self.client.info))
            self._arch = host_arch(str(info.get("Architecture", "")))
        return self._arch

    @property
    def features(self) -> EngineFeatures:
        """The daemon's version and image store, asked once per Engine."""
        if self._features is None:
            version = self._read(lambda api: api.version(), lambda: self._call(self.client.version))
            info = self._read(lambda api: api.info(), lambda: self._call(self.client.info))
            self._features = EngineFeatures.from_daemon(version, info)
        return self._features

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
    @contextlib.contextmanager
    def remembering(self) -> Iterator[None]:
        """Inside: image() asks the engine once per ref; any change to the image store through this
        Engine (tag, load, build, ...) drops what it kept. One build asks about the same refs many times."""
        self._memo = {}
        try:
            yield
        finally:
            self._memo = None

    def _forget(self) -> None:
        if self._memo is not None:
            self._memo.clear()

    def image(self, ref: str) -> ImageInfo | None:
        if self._memo is None:
            return self._inspect(ref)
        if ref not in self._memo:
            info = self._inspect(ref)
            self._memo[ref] = info
            if info is not None:  # asked again by its id (a build's results read each image's layers so)
                self._memo.setdefault(info.id, info)
        return self._memo[ref]

    def _inspect(self, ref: str) -> ImageInfo | None:
        if self._api is not None:
            try:
                attrs = self._api.inspect_image(ref)
            except engine_api.Unanswered:
                pass
            else:
                return None if attrs is None else ImageInfo.from_attrs(attrs)
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

    def labelled(self, key: str, value: str) -> list[ImageInfo]:
        """Every local image whose label `key` is `value` (e.g. a layer image by its digest)."""
        echo(["docker", "images", "--filter", f"label={key}={value}"])
        rows = self._read(
            lambda api: api.images({"label": f"{key}={value}"}),
            lambda: self._call(self.client.api.images, filters={"label": f"{key}={value}"}),
        )
        found = (self.image(str(row["Id"])) for row in rows)  # a listed id may be gone (or unreadable) by now
        return [info for info in found if info is not None]

    @_changes_images
    def tag(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        if not repo or "/" in tag:
            repo, tag = ref, "latest"
        echo(["docker", "tag", image_id, ref])
        if self._write(lambda api: api.tag(image_id, repo, tag)):
            return
        if not self._call(self.client.api.tag, image_id, repo, tag, force=True):
            raise DockerError(f"could not tag {image_id} as {ref}")

    @_changes_images
    def untag(self, ref: str) -> None:
        echo(["docker", "rmi", "--no-prune", ref])
        if self._write(lambda api: api.untag(ref)):
            return
        client = self.client  # the SDK loaded (under its lock) before its error type is named
        with contextlib.suppress(docker.errors.NotFound):
            self._call(client.api.remove_image, ref, noprune=True)

    def _write(self, call: Callable[[engine_api.EngineApi], object]) -> bool:
        """`call(api)` over the local socket: True when done there; False when there is no socket or no answer
        (then the SDK does it again, and words any error as it always has)."""
        if self._api is None:
            return False
        try:
            call(self._api)
        except engine_api.Unanswered:
            return False
        return True

    @_changes_images
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

    @_changes_images
    def load(self, archive: IO[bytes]) -> None:
        echo(["docker", "load"])
        try:
            if self._write(lambda api: api.load(archive)):
                return
            self.client.images.load(archive)
        except engine_api.LoadFailed as exc:
            raise DockerError(f"docker load failed: {_short(exc)}") from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise DockerError(f"docker load failed: {_short(exc)}") from exc

    # -- builds -----------------------------------------------------------
    def _check_buildx(self) -> None:
        if self._buildx_checked:
            return
        try:
            done = proc.run([self.cli, "buildx", "version"], text=True)
        except proc.ToolNotFound as exc:
            raise _not_found(self.cli) from exc
        if done.returncode != 0:
            raise DockerError(
                f"`{self.cli} buildx` is not available: {done.stderr.strip()[-300:]}",
                hint="install the buildx CLI plugin into ~/.docker/cli-plugins (`.ci/setup-host.sh` does it)",
            )
        self._buildx_checked = True

    @_changes_images
    def build(
        self,
        context: bytes,
        *,
        tags: Sequence[str],
        platform: str,
        no_cache: bool = False,
        verbose: bool = False,
        epoch: int | None = None,
        platform_tags: Mapping[str, str] | None = None,
        builder: str | None = None,
        layout: Path | None = None,
    ) -> str:
        """Build a context tar for `platform` (comma-separated for several); returns the image id.

        On a modern engine (see `features`) the image goes through the oci
        exporter with SOURCE_DATE_EPOCH=`epoch` and is loaded; `platform_tags`
        (platform -> ref) then also names each platform's own manifest. The
        image id is the manifest or index digest there, the config digest on
        the classic store. `builder` names a buildx builder to build on (its
        output comes back to this daemon as the OCI tar; it resolves bases itself).
        `layout` is the OCI layout directory the modern path exports into
        (ocilayout.py): blobs it already has are neither exported nor loaded
        again; without it, a throwaway one (every blob exported and loaded).
        """
        if not tags:
            raise ValueError("build needs a tag")
        if "," in platform and not self.features.modern:
            raise DockerError(
                f"{self.features.describe()}: it cannot build {platform} in one call",
                hint="build one platform at a time (--platform linux/arm64), or use Docker 26+ with the containerd "
                "image store (`.ci/setup-host.sh` installs it)",
            )
        with contextlib.ExitStack() as stack:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="imgbuild-build-")))
            what = f"docker buildx build for {platform} ({', '.join(tags)})"
            if self.features.modern:
                into = layout or tmp / "layout"
                stack.enter_context(ocilayout.locked(into))
                before = ocilayout.blob_names(into)
                top = self._export(context, into, tags[0], platform, no_cache, verbose, epoch, builder, what)
                image_id = self._load_layout(into, [(top, tags[0], platform_tags or {})], before)[tags[0]]
                for t in tags[1:]:
                    self.tag(image_id, t)
                return image_id
            iid = tmp / "iid"
            args = [*self._buildx_args(builder, platform, no_cache), "--load", "--iidfile", str(iid)]
            args += [a for t in tags for a in ("--tag", t)]
            self._buildx([*args, "-"], context, self._buildx_env(builder), verbose, what)
            image_id = iid.read_text().strip() if iid.exists() else ""
        if not image_id.startswith("sha256:"):
            info = self.image(tags[0])
            if info is None:
                raise DockerError(f"buildx finished but left no image for {', '.join(tags)}")
            image_id = info.id
        return image_id

    def _buildx_args(self, builder: str | None, platform: str, no_cache: bool) -> list[str]:
        args = [self.cli, *self._builder_args(builder), "build", "--platform", platform, "--progress", "plain"]
        return [*args, "--no-cache"] if no_cache else args

    def _buildx_env(self, builder: str | None, epoch: int | None = None) -> dict[str, str]:
        env = dict(os.environ)
        if builder:
            env.pop("BUILDX_BUILDER", None)  # the explicit choice (--builder/--context) wins
        if epoch is not None:
            env["SOURCE_DATE_EPOCH"] = str(epoch)
        return env

    def _export(
        self,
        context: bytes,
        layout: Path,
        name: str,
        platform: str,
        no_cache: bool,
        verbose: bool,
        epoch: int | None,
        builder: str | None,
        what: str,
    ) -> dict[str, Any]:
        """BuildKit builds `context` into the OCI layout directory (locked by the caller); the exported descriptor.

        Several platforms are built one call each, and their index is written here: dockerd 26's BuildKit
        can crash the whole daemon ("fatal error: concurrent map writes" in llb.addCap) when it converts one
        Dockerfile for two platforms at once, both sharing the stdin context's FileOp.
        """
        platforms = platform.split(",")
        if len(platforms) > 1:
            tops = [self._export(context, layout, name, p, no_cache, verbose, epoch, builder, what) for p in platforms]
            return _index_of(layout, tops, platforms, epoch)
        with tempfile.TemporaryDirectory(prefix="imgbuild-export-") as tmp:
            meta = Path(tmp) / "metadata.json"
            out = f"type=oci,tar=false,dest={layout},name={name},rewrite-timestamp=true"
            args = [*self._buildx_args(builder, platform, no_cache), "--provenance=false"]
            args += ["--metadata-file", str(meta), "--output", out, "-"]
            self._buildx(args, context, self._buildx_env(builder, epoch), verbose, what)
            return _descriptor(meta, name)

    def parent_in_layout(
        self, ref: str, platform: str, layout: Path, epoch: int
    ) -> tuple[dict[str, Any], bytes, bytes] | None:
        """(descriptor, manifest, config) of `ref`'s `platform` image in `layout`; None if `ref` is not in the store.

        An image imgbuild wrote or built is there already. A base the layout lacks is put there once
        per base and platform: BuildKit builds `FROM ref` into it (its blobs too, which the layout keeps
        so that a store losing one can be given it again), loading nothing; `exports.json` remembers it.
        """
        parent = self.image(ref)
        if parent is None:
            return None
        found = ocilayout.platform_image(layout, parent.id, platform)
        key = f"{parent.id} {platform}"
        with ocilayout.locked(layout):
            exported = ocilayout.exports(layout).get(key)
            if found is None and exported is not None:
                found = ocilayout.platform_image(layout, exported, platform)
            if found:
                return found
            context = _dockerfile_tar(f"FROM {ref}\n")
            name = f"imgbuild-export/{parent.id.removeprefix('sha256:')[:12]}:{platform.replace('/', '-')}"
            what = f"docker buildx build for {platform} (FROM {ref}, into {layout})"
            top = self._export(context, layout, name, platform, False, False, epoch, None, what)
            ocilayout.record_export(layout, key, str(top["digest"]))
            return ocilayout.platform_image(layout, str(top["digest"]), platform)

    def write_images(
        self,
        layers: Sequence[tuple[str, Sequence[layerimage.LayerPart]]] = (),
        variants: Sequence[tuple[str, Sequence[ConfigPart], Mapping[str, str]]] = (),
        *,
        epoch: int,
        layout: Path,
    ) -> dict[str, str]:
        """Layer images (tag, one part per platform), then variant images (tag, parts, platform -> tag of its
        manifest) written without BuildKit, in order, and loaded in one `docker load`; tag -> id of each written.

        layerimage.py and configimage.py write what BuildKit would for the layer and variant Dockerfiles.
        An image whose parent was written before it here stacks on that one; any other parent is read from
        `layout` (a base is exported into it first: `parent_in_layout`). Writing stops at the first image it
        cannot write (an engine without the oci path, a parent or a value not known there): that one and
        the rest are left to the caller, to build with BuildKit.
        """
        if not self.features.modern:
            return {}
        known: dict[tuple[str, str], tuple[dict[str, Any], bytes, bytes]] = {}  # (tag, platform) written here
        images: list[tuple[str, list[_Made], Mapping[str, str]]] = []

        def layer(part: Any, manifest: bytes, config: bytes) -> _Blobs | None:
            got = layerimage.layer_image(manifest, config, part.files, part.copy, part.labels, epoch)
            return None if got is None else (got.manifest, got.config, (got.layer, got.config, got.manifest))

        def variant(part: Any, manifest: bytes, config: bytes) -> _Blobs | None:
            got = configimage.variant_image(manifest, config, part.env, part.labels, epoch)
            return None if got is None else (got.manifest, got.config, (got.config, got.manifest))

        todo: list[tuple[str, str, Sequence[Any], Mapping[str, str], Callable[[Any, bytes, bytes], _Blobs | None]]]
        todo = [("write-layer-image", t, ps, {}, layer) for t, ps in layers]
        todo += [("write-config-image", t, ps, named, variant) for t, ps, named in variants]
        for what, tag, parts, named, make in todo:
            made = self._made(parts, known, make, epoch, layout)
            if made is None:
                break
            for part, m in zip(parts, made, strict=True):
                desc = {**m.manifest.descriptor(), "platform": dict(m.platform)}
                known[(tag, part.platform)] = (desc, m.manifest.data, m.config.data)
            echo(["imgbuild", what, tag, *(part.platform for part in parts)])
            images.append((tag, made, named))
        return self._write_images(images, epoch, layout) if images else {}

    def write_config_image(
        self, tag: str, parts: Sequence[ConfigPart], *, epoch: int, layout: Path, platform_tags: Mapping[str, str]
    ) -> str | None:
        """One variant image written without BuildKit (`write_images`); its id, or None (build it with BuildKit)."""
        return self.write_images(variants=[(tag, parts, platform_tags)], epoch=epoch, layout=layout).get(tag)

    def _made(
        self,
        parts: Sequence[Any],
        known: Mapping[tuple[str, str], tuple[dict[str, Any], bytes, bytes]],
        make: Callable[[Any, bytes, bytes], _Blobs | None],
        epoch: int,
        layout: Path,
    ) -> list[_Made] | None:
        """Each part's image over its parent (written before it here, or in `layout`); None if one cannot be made."""
        if not parts:
            return None
        made = []
        for part in parts:
            key = (part.parent_ref, part.platform)
            found = known.get(key) or self.parent_in_layout(part.parent_ref, part.platform, layout, epoch)
            if not found:
                return None
            desc, manifest, config = found
            blobs = make(part, manifest, config)
            if blobs is None:
                return None
            plat = desc.get("platform") or _platform_dict(part.platform)
            made.append(_Made(blobs[0], blobs[1], blobs[2], plat))
        return made

    def _write_images(
        self, images: Sequence[tuple[str, Sequence[_Made], Mapping[str, str]]], epoch: int, layout: Path
    ) -> dict[str, str]:
        """Put the blobs of each image (tag, one per platform, platform -> tag of its manifest) into `layout` and
        load them all in one `docker load` (several platforms: an index); tag -> id."""
        with ocilayout.locked(layout):
            before = ocilayout.blob_names(layout)
            tops: list[tuple[dict[str, Any], str, Mapping[str, str]]] = []
            for tag, made, named in images:
                blobs = [b for m in made for b in m.blobs]
                if len(made) == 1:
                    top = {**made[0].manifest.descriptor(), "platform": dict(made[0].platform)}
                else:
                    idx = configimage.index([(m.manifest, m.platform) for m in made])
                    blobs.append(idx)
                    top = idx.descriptor()
                top["annotations"] = {ocilayout.CREATED: configimage.timestamp(epoch)}
                for blob in blobs:
                    ocilayout.put_blob(layout, blob.digest, blob.data)
                tops.append((top, tag, named))
            return self._load_layout(layout, tops, before)

    def _builder_args(self, builder: str | None) -> list[str]:
        """`buildx --builder NAME`, or `--context NAME buildx` when NAME is a docker context.

        buildx refuses a docker context (another dockerd, e.g. a native arm64 node) as `--builder`;
        the CLI's `--context` selects its docker-driver builder instead.
        """
        if not builder:
            return ["buildx"]
        if builder not in self._contexts:
            self._contexts[builder] = bool(context_host(builder, self.cli)[0])
        return ["--context", builder, "buildx"] if self._contexts[builder] else ["buildx", "--builder", builder]

    def _buildx(self, args: list[str], context: bytes, env: dict[str, str], verbose: bool, what: str) -> None:
        """Run a buildx build; `buildx version` is asked only when it fails (one process less per build)."""
        try:
            child = proc.popen(
                args,
                stdin=proc.PIPE,
                stdout=None if verbose else proc.PIPE,
                stderr=None if verbose else proc.STDOUT,
                env=env,
            )
        except proc.ToolNotFound:
            self._check_buildx()  # names the missing CLI
            raise
        try:
            out, _ = child.communicate(context)
        except BaseException:
            child.kill()
            child.wait()
            raise
        if child.returncode != 0:
            self._check_buildx()  # a missing buildx plugin gets its own message and hint
            text = (out or b"").decode(errors="replace")
            if self._api is not None and not engine_api.EngineApi(self._api.path, timeout=10.0).ping():
                raise DockerError(
                    f"the Docker daemon stopped answering during {what}:\n{_tail(text, 8)}",
                    hint="it may have crashed: its log (`journalctl -u docker`, or /var/log/dockerd.log) says why; "
                    + START_HINT,
                )
            raise DockerError(
                f"{what} failed:\n{_tail(text)}",
                hint="run with IMGBUILD_ECHO=1 to see the command; `--verbose` shows the build log",
            )

    @_changes_images
    def _load_layout(
        self, layout: Path, tops: Sequence[tuple[dict[str, Any], str, Mapping[str, str]]], before: set[str]
    ) -> dict[str, str]:
        """`docker load` the images (descriptor, tag, platform -> tag) written into `layout`, in one tar; then name
        each platform's manifest where asked. Returns tag -> top digest.

        The indexes, manifests and configs are sent, and only the layers the layout did not have before
        (the store has the parents' layers); a store that lacks one of the others gets them all.
        """
        entries = []
        for top, tag, _ in tops:
            ref = reference.parse(tag)
            entries.append(ocilayout.top_entry(top, _full_name(ref), ref.tag or "latest"))
        names = ", ".join(tag for _, tag, _ in tops)
        named: list[tuple[dict[str, Any], str]] = []
        try:
            reach: dict[str, bool] = {}
            for top, _, _ in tops:
                reach.update(ocilayout.closure(layout, top))
            slim = [d for d, is_layer in reach.items() if not is_layer or d not in before]
            try:
                self.load(io.BytesIO(ocilayout.load_tar(layout, entries, slim)))
                lost = any(self._loaded_id(tag) != top["digest"] for top, tag, _ in tops)
            except DockerError as exc:
                if "not found" not in exc.message.lower():
                    raise
                lost = True
            if lost:  # the store lost a layer the layout kept: send everything
                with tempfile.TemporaryFile() as fh:
                    ocilayout.write_tar(fh, layout, entries, list(reach))
                    fh.seek(0)
                    self.load(fh)
            for top, tag, platform_tags in tops:
                if not platform_tags:
                    continue
                manifests = ocilayout.platform_manifests(layout, top)
                missing = sorted(set(platform_tags) - set(manifests))
                if missing:
                    raise DockerError(
                        f"the build of {tag} has no {', '.join(missing)} image (it has {', '.join(manifests)})"
                    )
                named += [(manifests[p], ref) for p, ref in sorted(platform_tags.items())]
        except ocilayout.LayoutError as exc:
            raise DockerError(f"the build of {names}: {exc}", hint=f"remove {layout} and build again") from exc
        if named:
            self.load(io.BytesIO(name_manifests(named)))
        for top, tag, _ in tops:
            found = self._loaded_id(tag)
            if found != top["digest"]:
                raise DockerError(
                    f"loaded the build of {tag}, but the store has {found or 'nothing'} under that name, "
                    f"not {top['digest']}"
                )
        return {tag: str(top["digest"]) for top, tag, _ in tops}

    def _loaded_id(self, tag: str) -> str | None:
        info = self.image(tag)
        return info.id if info else None

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
        binds: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
    ) -> RunResult:
        """`docker run --rm IMAGE ARGV...`; the image's own entrypoint applies unless `entrypoint` is given.

        `binds` ("host:container[:ro]") and `environment` are what runtime_run.runtime_run_options gives.
        """
        opts = ["--platform", platform] if platform else []
        opts += ["--entrypoint", shlex.join(entrypoint)] if entrypoint is not None else []
        opts += [a for b in binds for a in ("-v", b)]
        opts += [a for k, v in sorted((environment or {}).items()) for a in ("-e", f"{k}={v}")]
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
                    environment=dict(environment) if environment else None,
                    host_config=api.create_host_config(binds=list(binds)) if binds else None,
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


OCI_INDEX_TYPE = ocilayout.OCI_INDEX_TYPE
OCI_MANIFEST_TYPE = ocilayout.OCI_MANIFEST_TYPE
OCI_LAYOUT = ocilayout.OCI_LAYOUT


def name_manifests(entries: Sequence[tuple[dict[str, Any], str]]) -> bytes:
    """An OCI layout tar without blobs that names manifests already in the store: (descriptor, ref) pairs."""
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX_TYPE,
        "manifests": [
            {
                "mediaType": desc.get("mediaType", OCI_MANIFEST_TYPE),
                "digest": desc["digest"],
                "size": desc["size"],
                "annotations": {
                    "io.containerd.image.name": _full_name(reference.parse(ref)),
                    "org.opencontainers.image.ref.name": reference.parse(ref).tag or "latest",
                },
            }
            for desc, ref in entries
        ],
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("oci-layout", OCI_LAYOUT), ("index.json", json.dumps(index).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _dockerfile_tar(text: str) -> bytes:
    """A build context of one Dockerfile."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(text.encode())
        tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


def _full_name(ref: reference.Reference) -> str:
    return f"{ref.name}:{ref.tag or 'latest'}"


def _platform_dict(platform: str) -> dict[str, str]:
    os_name, _, arch = platform.partition("/")
    return {"architecture": arch.split("/")[0], "os": os_name}


def _index_of(
    layout: Path, tops: Sequence[Mapping[str, Any]], platforms: Sequence[str], epoch: int | None
) -> dict[str, Any]:
    """The index over one exported manifest per platform, written into `layout`; its descriptor."""
    manifests = []
    for top, platform in zip(tops, platforms, strict=True):
        if top.get("mediaType") in (OCI_INDEX_TYPE, ocilayout.DOCKER_LIST_TYPE):
            raise DockerError(f"buildx exported an index for {platform} alone ({top.get('digest')}), not one image")
        data = ocilayout.blob_path(layout, str(top["digest"])).read_bytes()
        blob = configimage.Blob(data, str(top.get("mediaType") or OCI_MANIFEST_TYPE))
        manifests.append((blob, top.get("platform") or _platform_dict(platform)))
    idx = configimage.index(manifests)
    ocilayout.put_blob(layout, idx.digest, idx.data)
    desc = idx.descriptor()
    if epoch is not None:
        desc["annotations"] = {ocilayout.CREATED: configimage.timestamp(epoch)}
    return desc


def _descriptor(meta: Path, tag: str) -> dict[str, Any]:
    """The exported image's descriptor from buildx's --metadata-file."""
    try:
        desc = json.loads(meta.read_text()).get("containerimage.descriptor")
    except (OSError, ValueError):
        desc = None
    if not isinstance(desc, dict) or not str(desc.get("digest", "")).startswith("sha256:"):
        raise DockerError(f"buildx finished but its metadata names no image for {tag} ({meta})")
    return desc


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
