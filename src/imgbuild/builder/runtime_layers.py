"""The runtime base's installed tree as package-granular layers: each dist's files (by its `*.dist-info/RECORD`)
in a deterministic tar of its own, so that a wheel gives the same layer digest whatever else the lock holds, and a
new vLLM release moves the few packages that changed, not the whole tree.

Why our own tars, and not one `COPY` per layer directory: BuildKit re-tars what a `COPY`/`ADD` step leaves, and
the digest of that tar is BuildKit's (its headers, its PAX records, its ordering), which differs between BuildKit
versions (docs/engineering notes); a `COPY` also depends on the chain of layers below it unless `--link`, and its
build context is sent again in full on every build. A tar we write ourselves (sorted entries, uid/gid 0, no user
names, mtime 0, modes 0644/0755) has a digest that is a function of the package's files alone. The tars are the
blobs of an OCI layout in the cache (`runtime_base.layout_dir`); the image is still built by BuildKit: `FROM` that
layout as a named `oci-layout://` context, which BuildKit takes blob for blob (no re-tar; verified on Docker 26.1
with the containerd store: the image's layer digests are the tars' sha256), with the labels and ENTRYPOINT on top.
Uncompressed, as the stand-ins' layers always were: a layer's digest is then its diff id too.

Which layer a file goes to (`split`, pure): a dist of at least `OWN_LAYER_BYTES` installed gets a layer of its own;
the smaller ones share `BUCKETS` buckets, chosen by a stable hash of the dist's name (adding a package to the lock
changes one bucket, never reshuffles the others); files that no RECORD lists go to one more bucket, `unowned`.
The order of the layers decides what a node unpacks again: a snapshotter keys each unpacked layer by its chain (the
layers below it), so a changed layer makes every layer above it unpack again (not download: the blobs are the
same). A package's new release usually comes with new releases of the packages that pin it (torch's with
torchvision's, xformers', flashinfer's, vLLM's), rarely with its own dependencies'. So the large layers come in
dependency order: a layer's height is its dist's longest chain of installed dependencies (`heights`, from each
dist's `Requires-Dist`), lowest first, largest first within a height (torch's CUDA libraries below torch, torch
below what pins it); then the buckets (many small packages: more likely to change), `unowned`, and last the layers
of `last` (the lock's root, `vllm`, new in every release). Measured on the 0.33.0 -> 0.34.0 locks:
benchmarks/results/issue34-layer-order.txt.
"""

from __future__ import annotations

import csv
import email.parser
import hashlib
import io
import json
import os
import re
import stat
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

OWN_LAYER_BYTES = 24 * 1024 * 1024  # a dist this large installed gets a layer of its own
BUCKETS = 32  # the small dists share these, by a hash of their name
MAX_LAYERS = 100  # in all, with the rootfs and the small layer of imgbuild's own files
UNOWNED = "unowned"
BIN = "bin"  # the console scripts' folder in the installed tree
LAYER_MEDIA = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_MEDIA = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA = "application/vnd.oci.image.config.v1+json"
_NORMALIZE = re.compile(r"[-_.]+")
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*(?:;(.*))?")
_EXTRA_MARKER = re.compile(r"\bextra\s*==")


def normalize(name: str) -> str:
    """PEP 503: the form a lock and a dist-info folder agree on."""
    return _NORMALIZE.sub("-", name).lower()


@dataclass(frozen=True)
class Dist:
    name: str  # normalized
    version: str
    files: tuple[str, ...]  # relative to the installed tree, sorted; the dist-info folder's own files included
    size: int
    requires: frozenset[str] = frozenset()  # normalized names of its Requires-Dist, those of extras left out


@dataclass(frozen=True)
class LayerPlan:
    name: str  # "pkg-torch", "bucket-07", "unowned"
    members: tuple[str, ...]  # the dists it holds (normalized names), sorted
    files: tuple[str, ...]  # relative to the installed tree, sorted
    size: int


def _record_paths(record: Path) -> list[str]:
    """RECORD's paths as paths relative to the tree (RECORD is relative to site-packages, which the tree is);
    paths that leave the tree are dropped."""
    out = []
    with record.open(newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh):
            if not row or not row[0]:
                continue
            path = os.path.normpath(row[0])
            if path.startswith("..") or os.path.isabs(path):
                continue
            out.append(PurePosixPath(path).as_posix())
    return out


def read_dists(tree: Path) -> list[Dist]:
    """Every dist installed in `tree` (uv's `--target`), with the files its RECORD lists that exist."""
    dists = []
    for info in sorted(tree.glob("*.dist-info")):
        record = info / "RECORD"
        if not record.is_file():
            continue
        raw, _, version = info.name.removesuffix(".dist-info").partition("-")
        files = {p for p in _record_paths(record) if (tree / p).is_file() or (tree / p).is_symlink()}
        files |= {p.relative_to(tree).as_posix() for p in info.rglob("*") if not p.is_dir()}
        size = sum((tree / p).lstat().st_size for p in files)
        dists.append(Dist(normalize(raw), version, tuple(sorted(files)), size, _requires(info / "METADATA")))
    return dists


def _requires(metadata: Path) -> frozenset[str]:
    """The dists a METADATA file's `Requires-Dist` names, but those only an extra asks for (`extra == "x"`)."""
    if not metadata.is_file():
        return frozenset()
    head = metadata.read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0]
    msg = email.parser.HeaderParser().parsestr(head)
    out = set()
    for req in msg.get_all("Requires-Dist") or ():
        found = _REQUIREMENT.match(req)
        if found and not _EXTRA_MARKER.search(found.group(2) or ""):
            out.add(normalize(found.group(1)))
    return frozenset(out)


def heights(dists: Sequence[Dist]) -> dict[str, int]:
    """Each dist's longest chain of installed dependencies: 0 for a dist that needs none of the others. A cycle
    (rare, but metadata allows it) is cut where the walk meets it again."""
    needs = {d.name: d.requires for d in dists}
    found: dict[str, int] = {}

    def height(name: str, path: frozenset[str]) -> int:
        if name not in found:
            below = [height(dep, path | {name}) for dep in sorted(needs[name]) if dep in needs and dep not in path]
            found[name] = 1 + max(below) if below else 0
        return found[name]

    for name in sorted(needs):
        height(name, frozenset())
    return found


def walk_files(tree: Path) -> list[str]:
    """Every file and symlink under `tree`, relative, sorted (directories come with the files)."""
    out = []
    for root, dirs, files in os.walk(tree):
        rel = Path(root).relative_to(tree)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            out.append((rel / name).as_posix())
    return sorted(out)


def source_of(path: str) -> str | None:
    """The module a `__pycache__/NAME.TAG.pyc` is the bytecode of (`DIR/NAME.py`); None for any other file."""
    head, _, name = path.rpartition("/")
    folder, _, cache = head.rpartition("/")
    if cache != "__pycache__" or not name.endswith(".pyc") or name.count(".") < 2:
        return None
    module = name.split(".", 1)[0] + ".py"
    return f"{folder}/{module}" if folder else module


def bucket_of(name: str, buckets: int = BUCKETS) -> int:
    """A stable bucket for a dist's name: the same in every lock, on every machine."""
    return int.from_bytes(hashlib.sha256(normalize(name).encode()).digest()[:8], "big") % buckets


def split(
    dists: Sequence[Dist],
    all_files: Iterable[str],
    *,
    last: Sequence[str] = (),
    own_bytes: int = OWN_LAYER_BYTES,
    buckets: int = BUCKETS,
    max_layers: int = MAX_LAYERS - 2,
) -> tuple[LayerPlan, ...]:
    """The tree's layers: large dists alone, small ones in buckets by name, unlisted files in `unowned`; a file two
    RECORDs list goes to the first dist by name, a module's `.pyc` to its module's dist. `last`: dists whose layers
    come at the end (the ones a release changes). More large dists than `max_layers` allows: the smallest of them go
    to their buckets."""
    owner: dict[str, str] = {}
    for dist in sorted(dists, key=lambda d: d.name):
        for path in dist.files:
            owner.setdefault(path, dist.name)
    all_files = list(all_files)
    for path in all_files:  # bytecode that no RECORD lists (runtime_bytecode) goes with its module
        source = source_of(path)
        if path not in owner and source in owner:
            owner[path] = owner[source]
    by_name = {d.name: d for d in dists}
    big = sorted((d for d in dists if d.size >= own_bytes), key=lambda d: (-d.size, d.name))
    used_buckets = {bucket_of(d.name, buckets) for d in dists if d.size < own_bytes}
    room = max_layers - 1 - len(used_buckets)  # 1: unowned
    while len(big) > max(room, 0):
        demoted = big.pop()
        if bucket_of(demoted.name, buckets) not in used_buckets:
            used_buckets.add(bucket_of(demoted.name, buckets))
            room -= 1
    alone = {d.name for d in big}
    groups: dict[str, list[str]] = {}
    for name in sorted(by_name):
        key = f"pkg-{name}" if name in alone else f"bucket-{bucket_of(name, buckets):02d}"
        groups.setdefault(key, []).append(name)
    files: dict[str, list[str]] = {key: [] for key in groups}
    group_of = {name: key for key, names in groups.items() for name in names}
    unowned: list[str] = []
    for path in sorted(set(all_files) | set(owner)):
        (files[group_of[owner[path]]] if path in owner else unowned).append(path)
    layers = [
        LayerPlan(key, tuple(names), tuple(files[key]), sum(by_name[n].size for n in names))
        for key, names in groups.items()
    ]
    if unowned:
        layers.append(LayerPlan(UNOWNED, (), tuple(unowned), 0))
    tail = {normalize(n) for n in last}
    rank = {"pkg": 0, "bucket": 1, UNOWNED: 2}
    height = heights(dists)

    def order(lay: LayerPlan) -> tuple[bool, int, int, int, str]:
        kind = lay.name.split("-")[0]
        level = max((height[m] for m in lay.members), default=0) if kind == "pkg" else 0
        return bool(tail & set(lay.members)), rank[kind], level, -lay.size, lay.name

    return tuple(sorted(layers, key=order))


# -- deterministic tars ----------------------------------------------------------
def archive_name(path: str, site_packages: str, bin_dir: str) -> str:
    """Where a tree path lands in the image: console scripts in `bin_dir`, the rest under site-packages."""
    head, _, rest = path.partition("/")
    if head == BIN and rest:
        return f"{bin_dir.strip('/')}/{rest}"
    return f"{site_packages.strip('/')}/{path}"


class _Hashing(io.RawIOBase):
    """A write-only file that hashes and counts what goes through it, and writes it on to `sink` if any."""

    def __init__(self, sink: IO[bytes] | None) -> None:
        self.sha = hashlib.sha256()
        self.size = 0
        self.sink = sink

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.size += len(data)
        if self.sink is not None:
            self.sink.write(data)
        return len(data)


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info


def tree_entries(tree: Path, paths: Iterable[str], site_packages: str, bin_dir: str) -> dict[str, Path]:
    """Archive name -> file, for tree-relative `paths`."""
    return {archive_name(p, site_packages, bin_dir): tree / p for p in paths}


def write_tar(entries: Mapping[str, Path], sink: IO[bytes] | None) -> tuple[str, int]:
    """The layer tar of `entries` (archive name -> file), written to `sink` (None: only hashed): every parent
    directory, entries sorted, uid/gid 0, no user names, mtime 0, 0755 for directories and executables, else 0644;
    regular files and symlinks only (a hardlink is stored as a file). Its `sha256:...` digest and size."""
    dirs = {str(parent) for name in entries for parent in PurePosixPath(name).parents if str(parent) != "."}
    out = _Hashing(sink)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(dirs | set(entries), key=lambda n: PurePosixPath(n).parts):
            if name not in entries:
                tar.addfile(_dir_info(name))
                continue
            src = entries[name]
            st = src.lstat()
            info = tarfile.TarInfo(name)
            if stat.S_ISLNK(st.st_mode):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(src), 0o777
                tar.addfile(info)
                continue
            info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
            with src.open("rb") as fh:
                tar.addfile(info, fh)
    return f"sha256:{out.sha.hexdigest()}", out.size


# -- the OCI layout the tars are blobs of -------------------------------------------------
@dataclass(frozen=True)
class Blob:
    digest: str  # sha256:...
    size: int


def canonical(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


EPOCH = "1970-01-01T00:00:00Z"


def image_config(arch: str, variant: str | None, layers: Sequence[tuple[str, Blob]]) -> dict[str, object]:
    """The layout image's config: the platform, the layers (uncompressed: diff id = digest) and one history entry
    per layer naming it (`docker history` shows which package a layer holds; BuildKit has none to make up), all
    dated at the epoch."""
    doc: dict[str, object] = {
        "architecture": arch,
        "os": "linux",
        "created": EPOCH,
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [b.digest for _, b in layers]},
        "history": [{"created": EPOCH, "created_by": f"imgbuild runtime layer {name}"} for name, _ in layers],
    }
    if variant:
        doc["variant"] = variant
    return doc


def manifest(config: Blob, layers: Sequence[Blob], annotations: Mapping[str, str]) -> dict[str, object]:
    doc: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA,
        "config": {"mediaType": CONFIG_MEDIA, "digest": config.digest, "size": config.size},
        "layers": [{"mediaType": LAYER_MEDIA, "digest": b.digest, "size": b.size} for b in layers],
    }
    if annotations:
        doc["annotations"] = dict(annotations)
    return doc


def rewrite_rootfs(src: IO[bytes], sink: IO[bytes] | None) -> tuple[str, int]:
    """mmdebstrap's rootfs tar as a deterministic layer: names without `./`, mtime 0, no user names, device
    nodes left out (the engine makes /dev); modes, owners, links as they were. Its digest and size."""
    out = _Hashing(sink)
    with (
        tarfile.open(fileobj=src, mode="r|") as tin,
        tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tout,
    ):
        for member in tin:
            if member.ischr() or member.isblk() or member.isfifo():
                continue
            name = os.path.normpath(member.name).lstrip("/")
            if name in (".", ""):
                continue
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid = member.type, member.mode, member.uid, member.gid
            info.linkname = os.path.normpath(member.linkname).lstrip("/") if member.islnk() else member.linkname
            info.size = member.size if member.isreg() else 0
            tout.addfile(info, tin.extractfile(member) if member.isreg() else None)
    return f"sha256:{out.sha.hexdigest()}", out.size
