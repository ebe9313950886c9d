"""Image layers and configs as bytes, made the same way on every machine (pure).

A layer is a tar of files under site-packages (parents included, root-owned,
0755 dirs and 0644 files, one mtime taken from the inputs), gzipped by hand:
a fixed 10-byte gzip header (no name, mtime 0, OS "unknown") around a raw
deflate stream at a fixed level. Python's own gzip header would carry the OS
byte that zlib was built with, which differs between Linux and macOS builds.
Equal inputs therefore give equal `diff_id`s and equal blob digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

LEVEL = 6
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


@dataclass(frozen=True)
class Blob:
    data: bytes = field(repr=False)
    digest: str
    size: int

    @classmethod
    def of(cls, data: bytes) -> Blob:
        return cls(data, "sha256:" + hashlib.sha256(data).hexdigest(), len(data))


@dataclass(frozen=True)
class Layer:
    blob: Blob  # the gzipped tar, as uploaded
    diff_id: str  # sha256 of the uncompressed tar, as the config lists it
    files: tuple[str, ...]


def gzip_bytes(data: bytes, level: int = LEVEL) -> bytes:
    comp = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 9, zlib.Z_DEFAULT_STRATEGY)
    body = comp.compress(data) + comp.flush()
    trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return GZIP_HEADER + body + trailer


def _parents(path: PurePosixPath) -> list[str]:
    return [str(p) for p in reversed(path.parents) if str(p) not in (".", "/")]


def layer_tar(files: Mapping[str, bytes], mtime: int) -> bytes:
    """A tar of `files` (image-relative paths without a leading /) and their parent directories."""
    entries: dict[str, bytes | None] = {}
    for name, data in files.items():
        pure = PurePosixPath(name.lstrip("/"))
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise ValueError(f"bad layer path {name!r}")
        for parent in _parents(pure):
            entries.setdefault(parent, None)
        entries[str(pure)] = data
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            content = entries[name]
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def make_layer(files: Mapping[str, bytes], mtime: int) -> Layer:
    tar = layer_tar(files, mtime)
    return Layer(Blob.of(gzip_bytes(tar)), "sha256:" + hashlib.sha256(tar).hexdigest(), tuple(sorted(files)))


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _set_env(env: list[str], updates: Sequence[tuple[str, str]]) -> list[str]:
    out = list(env)
    for key, value in updates:
        out = [e for e in out if e.split("=", 1)[0] != key]
        out.append(f"{key}={value}")
    return out


def derive_config(
    base: Mapping[str, object],
    *,
    layers: Sequence[Layer],
    layer_names: Sequence[str],
    env: Sequence[tuple[str, str]],
    labels: Mapping[str, str],
    created: str,
    comment: str,
) -> dict[str, object]:
    """The base's image config with `layers` on top: ENV and LABEL applied, ENTRYPOINT and CMD cleared."""
    config: dict[str, Any] = json.loads(json.dumps(base))  # a deep copy
    inner = dict(config.get("config") or {})
    inner["Env"] = _set_env(list(inner.get("Env") or []), env)
    inner["Labels"] = {**(inner.get("Labels") or {}), **labels}
    inner["Entrypoint"] = None
    inner["Cmd"] = None
    config["config"] = inner
    config["created"] = created
    rootfs = dict(config.get("rootfs") or {"type": "layers"})
    rootfs["diff_ids"] = [*(rootfs.get("diff_ids") or []), *(layer.diff_id for layer in layers)]
    config["rootfs"] = rootfs
    history = list(config.get("history") or [])
    for layer, name in zip(layers, layer_names, strict=True):
        history.append({"created": created, "created_by": f"imgbuild layer {name}: {len(layer.files)} files"})
    history.append({"created": created, "created_by": comment, "empty_layer": True})
    config["history"] = history
    for stale in ("container", "container_config", "docker_version"):
        config.pop(stale, None)
    return config
