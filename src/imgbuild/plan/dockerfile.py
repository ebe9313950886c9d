"""Dockerfiles and build contexts, rendered by pure functions.

Three kinds of build, none with a RUN (so no emulation is needed):

- a layer: `FROM parent`, one `COPY` of the layer's files, and a label naming
  the layer's inputs digest;
- a variant image: `FROM` its top layer (or the base), then ENV, LABEL and
  the cleared `ENTRYPOINT []` / `CMD []` (the ENTRYPOINT is kept where the
  variant says `image.entrypoint: keep`). It adds no filesystem layer, so
  images that share a layer image share its layers byte for byte;
- a join: one `FROM` per platform's image, picked by TARGETARCH, so that
  BuildKit makes the multi-platform index over those images as they are.

The context is a tar made here: only the files of the layer plus the
Dockerfile, sorted, uid/gid 0, fixed modes and mtime 0, so equal inputs give
an equal context (and `buildx build -` reads it from stdin).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

DOCKERFILE = "Dockerfile"
MTIME = 0


def quote(value: str) -> str:
    """A double-quoted Dockerfile word: backslash, quote and $ escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("\n", "\\n")
    return f'"{escaped}"'


def _key(key: str) -> str:
    if not key or any(c in key for c in ' \t\n="\\$'):
        return quote(key)
    return key


def copy_line(package_root: str, site_packages: str) -> str:
    """A layer's one COPY: the package tree of the context over the image's site-packages."""
    return f"COPY {package_root}/ {site_packages.rstrip('/')}/{package_root}/"


PACKAGES = "packages"  # a layer's context directory when it holds the files of several package roots


def layer_context_path(path: str, package_roots: Sequence[str]) -> str:
    """Where a layer's file (`vllm/x.py`) sits in its build context: as it is under one package root,
    under `packages/` when the layer holds several (so that one COPY makes one image layer)."""
    return path if len(package_roots) == 1 else f"{PACKAGES}/{path}"


def render_layer(parent_ref: str, package_roots: Sequence[str], site_packages: str, labels: Mapping[str, str]) -> str:
    """One COPY, so one image layer per imgbuild layer: the package root's tree (`vllm/`), or with files of
    several upstreams (`vllm/`, `flashinfer/`), the context's `packages/`, which holds each root's tree."""
    if len(package_roots) == 1:
        copy = copy_line(package_roots[0], site_packages)
    else:
        copy = f"COPY {PACKAGES}/ {site_packages.rstrip('/')}/"
    lines = [
        "# imgbuild layer: the files below, on top of the parent image",
        f"FROM {parent_ref}",
        copy,
        *_label_lines(labels),
    ]
    return "\n".join(lines) + "\n"


def render_join(images: Mapping[str, str]) -> str:
    """A multi-platform image over single-platform ones: arch -> image ref, through stage aliases
    (BuildKit refuses `FROM x:${TARGETARCH}`). Nothing is built: no context, no layer, no config change."""
    lines = ["# imgbuild image for several platforms: each platform's image as it is, picked by TARGETARCH"]
    lines += [f"FROM {ref} AS image-{arch}" for arch, ref in sorted(images.items())]
    lines.append("FROM image-${TARGETARCH}")
    return "\n".join(lines) + "\n"


def render_variant(
    from_ref: str, env: Iterable[tuple[str, str]], labels: Mapping[str, str], *, keep_entrypoint: bool = False
) -> str:
    """`keep_entrypoint` (image.entrypoint: keep) leaves the base's passthrough ENTRYPOINT; CMD is cleared always."""
    lines = ["# imgbuild image: metadata only, on top of its layers", f"FROM {from_ref}"]
    env = list(env)
    if env:
        lines.append("ENV " + " \\\n    ".join(f"{_key(k)}={quote(v)}" for k, v in env))
    lines.extend(_label_lines(labels))
    lines += ["CMD []"] if keep_entrypoint else ["ENTRYPOINT []", "CMD []"]
    return "\n".join(lines) + "\n"


def _label_lines(labels: Mapping[str, str]) -> list[str]:
    if not labels:
        return []
    return ["LABEL " + " \\\n      ".join(f"{_key(k)}={quote(v)}" for k, v in sorted(labels.items()))]


@dataclass(frozen=True)
class ContextEntry:
    name: str
    kind: str  # "dir" or "file"
    mode: int
    size: int

    def __str__(self) -> str:
        return f"{'d' if self.kind == 'dir' else '-'}{self.mode:04o} 0:0 {self.size:>9} {self.name}"


def context_tar(dockerfile: str, files: Mapping[str, bytes]) -> bytes:
    """A deterministic tar: the Dockerfile plus `files` (context-relative paths)."""
    for path in files:
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts or path == DOCKERFILE:
            raise ValueError(f"bad context path {path!r}")
    return tar_files({DOCKERFILE: dockerfile.encode(), **files}, MTIME)


def listing(context: bytes) -> list[ContextEntry]:
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        return [ContextEntry(m.name, "dir" if m.isdir() else "file", m.mode, m.size) for m in tar.getmembers()]


def _parents(path: PurePosixPath) -> list[str]:
    return [str(p) for p in reversed(path.parents) if str(p) not in (".", "/")]


def tar_files(files: Mapping[str, bytes], mtime: int) -> bytes:
    """A build context tar of `files` (relative paths without a leading /) and their parent directories:
    sorted, root-owned, 0755 dirs, 0644 files, one mtime."""
    entries: dict[str, bytes | None] = {}
    for name, data in files.items():
        pure = PurePosixPath(name.lstrip("/"))
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise ValueError(f"bad context path {name!r}")
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
