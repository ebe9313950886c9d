"""An OCI image layout directory that imgbuild writes and BuildKit exports into, and the tars `docker load` reads.

imgbuild's own writers (layerimage.py, configimage.py) put an image's blobs
here and read the parent's manifest and config from here; a base gets here by
one BuildKit export of `FROM base` (its store id then differs from the
exported digest: `exports.json` maps one to the other).

Docker 26's oci exporter with `tar=true` sends every blob of the image, base
layers included, through the buildx client (for a 240 MB base, ~5 s per
build), and `docker load` reads them all again (~1.6 s). Exported with
`tar=false` into a directory that persists in the imgbuild cache, BuildKit
skips the blobs the directory already has, and the tar loaded next holds the
image's index, manifests and configs (small) and only the layers this build
wrote: the containerd image store takes a manifest whose layers it already has
(checked on Docker 26.1.5). A store that lacks one answers "content digest ...
not found"; the caller then loads every blob. (A manifest the tar lacks is
not an error to `docker load`: it names an image it cannot show. So those are
always sent.)

No docker here: directory listing, JSON and tar writing only.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

OCI_INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"
CREATED = "org.opencontainers.image.created"


class LayoutError(Exception):
    """The layout directory lacks a blob a manifest names, or a blob is not what it should be."""


def blob_path(layout: Path, digest: str) -> Path:
    algo, _, hexpart = digest.partition(":")
    return layout / "blobs" / algo / hexpart


def blob_names(layout: Path) -> set[str]:
    """Every blob digest the directory holds now."""
    root = layout / "blobs" / "sha256"
    try:
        return {f"sha256:{p.name}" for p in root.iterdir()}
    except FileNotFoundError:
        return set()


@contextlib.contextmanager
def locked(layout: Path) -> Iterator[None]:
    """One exporter at a time per directory: BuildKit rewrites its index.json on every export."""
    layout.mkdir(parents=True, exist_ok=True)
    with (layout / ".imgbuild-lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _json(layout: Path, digest: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(blob_path(layout, digest).read_bytes())
    except FileNotFoundError as exc:
        raise LayoutError(f"{layout}: no blob {digest}") from exc
    return data


def closure(layout: Path, top: Mapping[str, Any]) -> dict[str, bool]:
    """Every blob the descriptor `top` reaches (index, manifests, configs, layers; parents first) -> is a layer."""
    out: dict[str, bool] = {}
    todo = [(dict(top), False)]
    while todo:
        desc, is_layer = todo.pop(0)
        digest = str(desc["digest"])
        if digest in out:
            continue
        out[digest] = is_layer
        media = desc.get("mediaType")
        if media in (OCI_INDEX_TYPE, DOCKER_LIST_TYPE):
            todo.extend((m, False) for m in _json(layout, digest).get("manifests") or [])
        elif not is_layer and (media is None or "manifest" in str(media)):
            body = _json(layout, digest)
            todo.append((body["config"], False))
            todo.extend((layer, True) for layer in body.get("layers") or [])
    return out


def platform_manifests(layout: Path, top: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """platform -> manifest descriptor below `top` (an index, or one manifest)."""
    if top.get("mediaType") not in (OCI_INDEX_TYPE, DOCKER_LIST_TYPE):
        config = _json(layout, str(_json(layout, str(top["digest"]))["config"]["digest"]))
        return {f"{config.get('os')}/{config.get('architecture')}": dict(top)}
    out = {}
    for m in _json(layout, str(top["digest"])).get("manifests") or []:
        plat = m.get("platform") or {}
        out[f"{plat.get('os')}/{plat.get('architecture')}"] = m
    return out


def platform_image(layout: Path, digest: str, platform: str) -> tuple[dict[str, Any], bytes, bytes] | None:
    """(descriptor, manifest bytes, config bytes) of `platform`'s image under `digest`; None if not all here."""
    try:
        top = _json(layout, digest)
        if top.get("mediaType") in (OCI_INDEX_TYPE, DOCKER_LIST_TYPE):
            manifests = platform_manifests(layout, {"mediaType": top["mediaType"], "digest": digest})
            desc = manifests.get(platform)
            if desc is None:
                return None
        else:
            desc = {"mediaType": top.get("mediaType"), "digest": digest}
        manifest = blob_path(layout, str(desc["digest"])).read_bytes()
        config = blob_path(layout, str(json.loads(manifest)["config"]["digest"])).read_bytes()
    except (LayoutError, OSError, ValueError, KeyError, TypeError):
        return None
    return dict(desc), manifest, config


EXPORTS = "exports.json"  # "<store id> <platform>" -> the digest BuildKit exported that image under here


def exports(layout: Path) -> dict[str, str]:
    """The images exported into the directory (images the store has under another id); {} if none or unreadable."""
    try:
        data = json.loads((layout / EXPORTS).read_text())
    except (OSError, ValueError):
        return {}  # a lost or torn record only costs one export more
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def record_export(layout: Path, key: str, digest: str) -> None:
    """Remember an export (the caller holds `locked`); written atomically."""
    path = layout / EXPORTS
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**exports(layout), key: digest}, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def put_blob(layout: Path, digest: str, data: bytes) -> None:
    """Write a blob into the directory (atomically; a blob already there is left as it is)."""
    path = blob_path(layout, digest)
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def top_entry(desc: Mapping[str, Any], name: str, tag: str) -> dict[str, Any]:
    """index.json's entry for the exported image, named as BuildKit's own tar names it."""
    entry: dict[str, Any] = {k: desc[k] for k in ("mediaType", "digest", "size") if k in desc}
    annotations = {NAME: name, REF_NAME: tag}
    created = (desc.get("annotations") or {}).get(CREATED)
    if created:
        annotations[CREATED] = created
    entry["annotations"] = dict(sorted(annotations.items()))
    if desc.get("platform"):
        entry["platform"] = desc["platform"]
    return entry


def write_tar(out: IO[bytes], layout: Path, entries: Sequence[Mapping[str, Any]], blobs: Sequence[str]) -> None:
    """An OCI layout tar: `entries` in index.json and the `blobs` (digests) from the directory."""
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX_TYPE, "manifests": list(entries)}
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("oci-layout", OCI_LAYOUT), ("index.json", json.dumps(index).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for digest in blobs:
            path = blob_path(layout, digest)
            if not path.is_file():
                raise LayoutError(f"{layout}: no blob {digest}")
            tar.add(path, arcname=f"blobs/sha256/{path.name}", recursive=False)


def load_tar(layout: Path, entries: Sequence[Mapping[str, Any]], blobs: Sequence[str]) -> bytes:
    buf = io.BytesIO()
    write_tar(buf, layout, entries, blobs)
    return buf.getvalue()
