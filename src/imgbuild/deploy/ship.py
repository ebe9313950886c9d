"""`imgbuild ship VARIANT --to NODE...`: put an image on every node, sending only what a node lacks.

`docker load` (20.10) looks each layer of an archive up by chain id and reads
the layer's tar only when the daemon does not have that chain already; an
archive without those layers loads, with the same image id (measured: see
docs/shipping.md). So for each node:

1. ask which leading layers of the image it holds (the diff ids of its images);
2. refuse when it lacks the base, unless --with-base (then everything goes);
3. stream the `docker save` archive minus the layers it has, with no tags in
   it (`RepoTags: null`, no `repositories`), so loading moves no tag;
4. check on the node that the image id and the imgbuild labels match, and
   only then tag it. An interrupted transfer leaves no image under the tag.

Nodes are shipped in parallel; a node that fails is named and the others
still finish.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imgbuild.deploy.node_engine import NodeEngine, copy_save, push_local
from imgbuild.deploy.tunnel import REPOSITORY, Forward, loopback_registry, node_path
from imgbuild.errors import DockerError, ImgbuildError
from imgbuild.images.docker import Engine, ImageInfo

CHUNK = 1 << 20
Progress = Callable[[str, int], None]  # (node, bytes sent so far)


# -- planning (pure) --------------------------------------------------------------------
def held_prefix(layers: Sequence[str], chains: Sequence[Sequence[str]]) -> int:
    """How many leading layers of `layers` some image on the node already has."""
    best = 0
    for chain in chains:
        n = 0
        for a, b in zip(layers, chain, strict=False):
            if a != b:
                break
            n += 1
        best = max(best, n)
    return best


def base_layers(info: ImageInfo) -> int:
    """Layers below imgbuild's own (its `imgbuild.layers` label lists the overlay layers)."""
    try:
        own = len(json.loads(info.labels.get("imgbuild.layers", "[]")))
    except ValueError:
        own = 0
    return max(len(info.layers) - own, 0)


@dataclass(frozen=True)
class NodePlan:
    node: str
    present: bool  # the node has the image id already: only tags move
    held: int  # leading layers it has
    send: tuple[int, ...]  # indexes of the layers to send


def plan_node(node: str, info: ImageInfo, chains: Sequence[Sequence[str]], has_id: bool, with_base: bool) -> NodePlan:
    if has_id:
        return NodePlan(node, True, len(info.layers), ())
    held = held_prefix(info.layers, chains)
    base = base_layers(info)
    if held < base and not with_base:
        name = info.labels.get("org.opencontainers.image.base.name", "the base image")
        raise DockerError(
            f"node {node}: lacks the base {name} (it has {held} of the image's {base} base layers)",
            hint=f"load the base there first (`docker save {name} | docker -H NODE load`), or pass --with-base "
            "to send it too",
        )
    return NodePlan(node, False, held, tuple(range(held, len(info.layers))))


# -- the archive -----------------------------------------------------------------------
@dataclass
class Archive:
    """A `docker save` spool: its manifest, and which members belong to which layer."""

    path: Path
    size: int
    manifest: list[dict[str, Any]]

    @classmethod
    def save(cls, engine: Engine, image_id: str, directory: Path) -> Archive:
        path = directory / "image.tar"
        with path.open("wb") as out:
            size = copy_save(engine, image_id, out)
        with tarfile.open(path) as tar:
            member = tar.extractfile("manifest.json")
            if member is None:
                raise DockerError(f"docker save {image_id}: the archive has no manifest.json")
            manifest = json.loads(member.read())
        if len(manifest) != 1:
            raise DockerError(f"docker save {image_id}: expected one image in the archive, found {len(manifest)}")
        return cls(path, size, manifest)

    def layer_dirs(self) -> list[str]:
        return [p.rsplit("/", 1)[0] for p in self.manifest[0]["Layers"]]

    def stream(self, send: Sequence[int]) -> Iterator[bytes]:
        """The archive with only the layers `send`, no tags; produced as it is read."""
        skip = {d for i, d in enumerate(self.layer_dirs()) if i not in set(send)}
        manifest = [{**self.manifest[0], "RepoTags": None}]
        read_fd, write_fd = os.pipe()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                with (
                    os.fdopen(write_fd, "wb") as pipe,
                    tarfile.open(self.path) as src,
                    tarfile.open(fileobj=pipe, mode="w|", format=tarfile.PAX_FORMAT) as dst,
                ):
                    for m in src:
                        top = m.name.split("/", 1)[0]
                        if top in skip or m.name in ("repositories", "manifest.json"):
                            continue
                        dst.addfile(m, src.extractfile(m) if m.isfile() else None)
                    data = json.dumps(manifest).encode()
                    info = tarfile.TarInfo("manifest.json")
                    info.size = len(data)
                    info.mtime = 0
                    dst.addfile(info, io.BytesIO(data))
            except BrokenPipeError:
                pass  # the reader stopped (transfer failed); its error is the one to report
            except BaseException as exc:  # noqa: BLE001 - handed to the reader's thread
                errors.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        with os.fdopen(read_fd, "rb") as pipe:
            while data := pipe.read(CHUNK):
                yield data
        writer.join()
        if errors:
            raise errors[0]


# -- one node ----------------------------------------------------------------------------
@dataclass
class NodeResult:
    node: str
    ok: bool
    status: str  # shipped | present | failed
    bytes_sent: int = 0
    layers_sent: int = 0
    layers_held: int = 0
    seconds: float = 0.0
    error: str = ""
    hint: str = ""
    note: str = ""
    image_id: str = ""
    tags: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "ok": self.ok,
            "status": self.status,
            "bytes_sent": self.bytes_sent,
            "layers_sent": self.layers_sent,
            "layers_held": self.layers_held,
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "hint": self.hint,
            "note": self.note,
            "image_id": self.image_id,
            "tags": self.tags,
        }


def imgbuild_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.startswith(("imgbuild.", "org.opencontainers.image."))}


@dataclass
class Sources:
    """What nodes are fed from, made on first use and shared: the archive, and the loopback registry."""

    archive: Callable[[], Archive]
    registry: Callable[[], tuple[int, str]]  # (port here, manifest digest) of the image pushed there
    # This host keeps images in containerd: its ids are manifest digests and its `docker save`
    # an OCI layout, so every node pulls from the loopback registry.
    here_containerd: bool = False


def ship_node(
    node: str, info: ImageInfo, sources: Sources, tags: Sequence[str], *, with_base: bool, progress: Progress
) -> NodeResult:
    started = time.perf_counter()
    result = NodeResult(node, False, "failed")
    remote: NodeEngine | None = None
    pulled = None  # the registry name a containerd node pulled under; dropped at the end
    try:
        remote = NodeEngine.connect_node(node)
        node_store = remote.containerd_store()
        store = node_store or sources.here_containerd
        has = find_same(remote, info) if store else remote.image(info.id)
        chains = [] if has else remote.layer_chains()
        plan = plan_node(node, info, chains, has is not None, with_base)
        result.layers_held, result.layers_sent = plan.held, len(plan.send)
        target = has.id if has else info.id
        if not plan.present and store:
            result.note = (
                "containerd image store: pulled from a loopback registry (its docker load wants every layer)"
                if node_store
                else "this host's containerd image store: pulled from a loopback registry (image ids differ by store)"
            )
            target, pulled = _pull_via_registry(remote, sources, result, progress)
        elif not plan.present:
            _load_archive(remote, plan, sources, result, progress)
        landed = remote.image(target)
        if landed is None:
            raise DockerError(f"node {node}: the transfer finished but image {target[:19]} is not there")
        if landed.layers != info.layers or imgbuild_labels(landed.labels) != imgbuild_labels(info.labels):
            raise DockerError(f"node {node}: image {target[:19]} differs from {info.id[:19]} here; no tag was moved")
        for ref in tags:
            remote.tag_image(target, ref)
        result.image_id = target
        result.ok, result.status, result.tags = True, "present" if plan.present else "shipped", list(tags)
    except ImgbuildError as exc:
        result.error, result.hint = exc.message, exc.hint or ""
    finally:
        if remote is not None:
            if pulled is not None:
                with contextlib.suppress(ImgbuildError):  # after the tags (or on failure: no half image stays)
                    remote.untag(pulled)
            remote.close()
    result.seconds = time.perf_counter() - started
    return result


def find_same(remote: NodeEngine, info: ImageInfo) -> ImageInfo | None:
    """On a containerd-store node (ids are manifest digests): an image with our tag, layers and labels."""
    for ref in info.tags:
        there = remote.image(ref)
        if there and there.layers == info.layers and imgbuild_labels(there.labels) == imgbuild_labels(info.labels):
            return there
    return None


def _load_archive(remote: NodeEngine, plan: NodePlan, sources: Sources, result: NodeResult, progress: Progress) -> None:
    sent = 0

    def counted() -> Iterator[bytes]:
        nonlocal sent
        for chunk in sources.archive().stream(plan.send):
            sent += len(chunk)
            progress(remote.name, sent)
            yield chunk

    try:
        remote.load_stream(counted())
    finally:
        result.bytes_sent = sent


def _pull_via_registry(remote: NodeEngine, sources: Sources, result: NodeResult, progress: Progress) -> tuple[str, str]:
    """(image id there, the name it was pulled under)."""
    port, digest = sources.registry()
    forward = Forward(port)
    try:
        with node_path(remote.url, forward.port) as there:
            ref = f"127.0.0.1:{there}/{REPOSITORY}@{digest}"
            remote.pull_ref(ref)
            progress(remote.name, forward.bytes_down)
        landed = remote.image(ref)
        if landed is None:
            raise DockerError(f"node {remote.name}: pulled {ref}, but it is not there")
        return landed.id, ref
    finally:
        result.bytes_sent = forward.bytes_down
        forward.close()


# -- all nodes ---------------------------------------------------------------------------
@dataclass
class Shipped:
    image: str
    image_id: str
    full_size: int  # bytes of the whole `docker save` archive
    results: list[NodeResult]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "image": self.image,
            "image_id": self.image_id,
            "full_size": self.full_size,
            "nodes": [r.to_json() for r in self.results],
        }


def ship(
    engine: Engine, ref: str, tags: Sequence[str], nodes: Sequence[str], *, with_base: bool = False,
    progress: Progress | None = None, jobs: int = 8,
) -> Shipped:  # fmt: skip
    info = engine.require(ref)
    lock = threading.Lock()
    spool: list[Archive] = []
    with tempfile.TemporaryDirectory(prefix="imgbuild-ship-") as tmp:

        def archive() -> Archive:  # one `docker save` for all nodes, and only if some node needs layers
            with lock:
                if not spool:
                    spool.append(Archive.save(engine, info.id, Path(tmp)))
                return spool[0]

        with contextlib.ExitStack() as stack:
            pushed: list[tuple[int, str]] = []

            def registry() -> tuple[int, str]:  # one loopback registry and one push, only for containerd nodes
                with lock:
                    if not pushed:
                        port = stack.enter_context(loopback_registry())
                        pushed.append((port, push_local(engine, info.id, f"127.0.0.1:{port}/{REPOSITORY}:ship")))
                    return pushed[0]

            sources = Sources(archive, registry, here_containerd=engine.features.containerd_store)
            report = progress or (lambda _node, _sent: None)
            with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(nodes)))) as pool:
                futures = [
                    pool.submit(ship_node, n, info, sources, tags, with_base=with_base, progress=report) for n in nodes
                ]
                results = [f.result() for f in futures]
        full = spool[0].size if spool else _saved_size(engine, info.id)
    return Shipped(ref, info.id, full, results)


def _saved_size(engine: Engine, image_id: str) -> int:
    """The size `docker save` would send (for the report when no node needed anything)."""
    with tempfile.TemporaryFile() as out:
        return copy_save(engine, image_id, out)
