"""A layer image (FROM parent, one COPY of the layer's files, LABEL) written without BuildKit (pure).

`dockerfile.render_layer` asks BuildKit for an image of the parent's layers
plus one new layer. This module makes what BuildKit (Docker 26, oci exporter,
rewrite-timestamp, SOURCE_DATE_EPOCH) makes of it on the bases imgbuild
builds, whose directories are all 0755, root-owned, mtime 0:

- the layer tar is what BuildKit's differ writes for that COPY: each parent
  directory from the image root down (0755, root, mtime 0), then the files
  (0644, root, mtime 0, as the context has them), in walk order (path
  components compared one by one), in USTAR headers as Go's archive/tar
  writes them, ending in two zero blocks. Its sha256, the diff_id, is
  BuildKit's;
- the config is the parent's with the label set, the diff_id appended and
  BuildKit's two history entries, written as Go writes it: BuildKit's bytes;
- the layer blob is that tar gzipped by `gzip_bytes` (fixed header and
  level). Go's deflate writes other bytes, so the blob, and with it the
  manifest digest, differs from BuildKit's; equal inputs still give equal
  digests.

tests/docker/test_layer_image.py holds the tar and the config equal to
BuildKit's. A path that needs more than USTAR (over 255 bytes, a component
over 100, not ASCII), a label with a control character, or a parent whose
config or manifest is not in the shape known here returns None: the caller
builds with BuildKit instead.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from imgbuild.images import configimage
from imgbuild.images.configimage import OCI_CONFIG_TYPE, Blob
from imgbuild.images.ocilayout import OCI_MANIFEST_TYPE

LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
BLOCK = 512
NAME_SIZE, PREFIX_SIZE = 100, 155


@dataclass(frozen=True)
class LayerPart:
    """One platform of a layer image: its parent and what the layer Dockerfile copies and labels."""

    parent_ref: str
    platform: str
    files: Mapping[str, bytes] = field(repr=False)  # by path in the image, no leading /
    copy: str  # the Dockerfile's COPY line
    labels: Mapping[str, str]


@dataclass(frozen=True)
class LayerImage:
    layer: Blob  # the gzipped tar
    diff_id: str
    config: Blob
    manifest: Blob


def _octal(value: int, width: int) -> bytes:
    """Go's formatOctal: zero-padded digits, a NUL last."""
    digits = f"{value:o}".encode()
    if len(digits) > width - 1:
        raise ValueError(f"{value} does not fit a {width}-byte tar field")
    return digits.rjust(width - 1, b"0") + b"\0"


def _split_name(name: str) -> tuple[str, str] | None:
    """(prefix, name) as Go's splitUSTARPath splits a long path; None where USTAR cannot hold it."""
    if len(name) <= NAME_SIZE:
        return "", name
    length = min(len(name), PREFIX_SIZE + 1)
    if name[length - 1] == "/":
        length -= 1
    cut = name.rfind("/", 0, length)
    rest = len(name) - cut - 1
    if cut <= 0 or rest > NAME_SIZE or rest == 0 or cut > PREFIX_SIZE:
        return None
    return name[:cut], name[cut + 1 :]


def _header(name: str, *, directory: bool, size: int) -> bytes | None:
    if not name.isascii():
        return None
    split = _split_name(name)
    if split is None:
        return None
    prefix, short = split
    fields = [
        short.encode().ljust(NAME_SIZE, b"\0"),
        _octal(0o755 if directory else 0o644, 8),
        _octal(0, 8),  # uid
        _octal(0, 8),  # gid
        _octal(size, 12),
        _octal(0, 12),  # mtime
        b" " * 8,  # the checksum, summed as spaces
        b"5" if directory else b"0",
        b"\0" * 100,  # linkname
        b"ustar\x0000",
        b"\0" * 64,  # uname, gname
        _octal(0, 8),  # devmajor
        _octal(0, 8),  # devminor
        prefix.encode().ljust(PREFIX_SIZE, b"\0"),
    ]
    header = b"".join(fields).ljust(BLOCK, b"\0")
    checksum = _octal(sum(header), 7) + b" "
    return header[:148] + checksum + header[156:]


LEVEL = 6
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, mtime 0, OS "unknown"


def gzip_bytes(data: bytes, level: int = LEVEL) -> bytes:
    """gzip with a fixed header (Python's own carries the OS byte zlib was built with) at a fixed level."""
    comp = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 9, zlib.Z_DEFAULT_STRATEGY)
    body = comp.compress(data) + comp.flush()
    trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return GZIP_HEADER + body + trailer


def layer_tar(files: Mapping[str, bytes]) -> bytes | None:
    """The tar BuildKit's differ writes for `files` (image paths without a leading /); None beyond USTAR."""
    entries: dict[tuple[str, ...], bytes | None] = {}
    for path, data in files.items():
        parts = PurePosixPath(path).parts
        if not parts or parts[0] == "/" or ".." in parts:
            raise ValueError(f"bad layer path {path!r}")
        for depth in range(1, len(parts)):
            entries.setdefault(parts[:depth], None)
        entries[parts] = data
    out = bytearray()
    for parts in sorted(entries):
        content = entries[parts]
        name = "/".join(parts) + ("/" if content is None else "")
        header = _header(name, directory=content is None, size=len(content or b""))
        if header is None:
            return None
        out += header
        if content:
            out += content + b"\0" * (-len(content) % BLOCK)
    return bytes(out + b"\0" * (2 * BLOCK))


def layer_config(
    parent_config: bytes, diff_id: str, copy_line: str, labels: Mapping[str, str], epoch: int
) -> bytes | None:
    """The config BuildKit writes for render_layer(...) over `parent_config`; None where this is not sure."""
    if not all(configimage.plain(t) for pair in labels.items() for t in pair):
        return None
    image = configimage.normalized(parent_config)
    if image is None or not isinstance(image.get("rootfs"), dict):
        return None
    when = configimage.timestamp(epoch)
    rootfs = dict(image["rootfs"])
    rootfs["diff_ids"] = [*(rootfs.get("diff_ids") or []), diff_id]
    history: list[dict[str, Any]] = list(image["history"])
    history.append({"created": when, "created_by": f"{copy_line} # buildkit", "comment": configimage.COMMENT})
    cfg: dict[str, Any] = dict(image["config"])
    if labels:
        cfg["Labels"] = dict(sorted({**(cfg.get("Labels") or {}), **labels}.items()))
        line = "LABEL " + " ".join(f"{k}={v}" for k, v in sorted(labels.items()))
        history.append({"created": when, "created_by": line, "comment": configimage.COMMENT, "empty_layer": True})
    image.update(config={k: cfg[k] for k in configimage.CONFIG_ORDER if k in cfg}, rootfs=rootfs, history=history)
    image["created"] = when
    return configimage.go_json(dict(sorted(image.items()))).encode()


def layer_image(
    parent_manifest: bytes,
    parent_config: bytes,
    files: Mapping[str, bytes],
    copy_line: str,
    labels: Mapping[str, str],
    epoch: int,
) -> LayerImage | None:
    """The layer image over a parent's OCI manifest and config; None where BuildKit has to build it."""
    manifest = configimage.oci_manifest(parent_manifest)
    if manifest is None:
        return None
    tar = layer_tar(files)
    if tar is None:
        return None
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    config_bytes = layer_config(parent_config, diff_id, copy_line, labels, epoch)
    if config_bytes is None:
        return None
    layer = Blob(gzip_bytes(tar), LAYER_TYPE)
    config = Blob(config_bytes, OCI_CONFIG_TYPE)
    layers = [{k: d[k] for k in ("mediaType", "digest", "size")} for d in manifest.get("layers") or []]
    body = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_TYPE,
        "config": config.descriptor(),
        "layers": [*layers, layer.descriptor()],
    }
    return LayerImage(layer, diff_id, config, Blob(configimage.go_indent(body), OCI_MANIFEST_TYPE))
