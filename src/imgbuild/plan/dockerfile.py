"""Dockerfiles and deterministic build contexts (pure): a variant image is FROM its base plus one COPY per layer,
no RUN (so no emulation; `imgbuild build` compiles the layers' bytecode in a container of the base beforehand); a
join picks each platform's image by TARGETARCH. The bake file's Dockerfile, which has no such step before it,
compiles the bytecode in a stage of its own (`bytecode=True`): one RUN of the base's python per platform."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

DOCKERFILE = "Dockerfile"
MTIME = 0
LAYERS = "layers"  # the context directory of the layers: one subdirectory per layer
BYTECODE_DIR = "/imgbuild-bytecode"  # the bake file's compile stage: the layers with their .pyc, then COPY --from
# Run by the base's python3 in that stage (argv: the folder, site-packages, the layers): each layer's modules
# compiled in checked-hash mode, as `imgbuild build`'s layers carry them (plan/bytecode.py: no mtime in the .pyc,
# named for the module's path in the image), then every mtime set to 0, so the COPY holds no build time.
COMPILE_LAYERS = """import os, sys, py_compile as c
root, site = sys.argv[1], sys.argv[2]
for layer in sys.argv[3:]:
    top = os.path.join(root, layer)
    for d, _, names in sorted(os.walk(top)):
        for n in sorted(names):
            if n.endswith('.py'):
                p = os.path.join(d, n)
                c.compile(p, dfile=site + '/' + os.path.relpath(p, top), doraise=True,
                          invalidation_mode=c.PycInvalidationMode.CHECKED_HASH)
for d, dirs, names in os.walk(root):
    for n in dirs + names:
        os.utime(os.path.join(d, n), (0, 0))
"""


def quote(value: str) -> str:
    """A double-quoted Dockerfile word: backslash, quote and $ escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("\n", "\\n")
    return f'"{escaped}"'


def _key(key: str) -> str:
    if not key or any(c in key for c in ' \t\n="\\$'):
        return quote(key)
    return key


def render_join(images: Mapping[str, str]) -> str:
    """A multi-platform image over single-platform ones: arch -> image ref, through stage aliases
    (BuildKit refuses `FROM x:${TARGETARCH}`). Nothing is built: no context, no layer, no config change."""
    lines = ["# imgbuild image for several platforms: each platform's image as it is, picked by TARGETARCH"]
    lines += [f"FROM {ref} AS image-{arch}" for arch, ref in sorted(images.items())]
    lines.append("FROM image-${TARGETARCH}")
    return "\n".join(lines) + "\n"


def render_image(
    base: str,
    site_packages: str,
    layers: Sequence[str],
    env: Iterable[tuple[str, str]],
    labels: Mapping[str, str],
    *,
    keep_entrypoint: bool = False,
    base_arg: bool = False,
    bytecode: bool = False,
) -> str:
    """A variant image: its base, one COPY per layer (`layers/<name>/`), ENV, LABEL, cleared CMD and (unless
    `keep_entrypoint`) ENTRYPOINT. `base_arg`: the base through `ARG BASE`, which the bake file's CI overrides.
    `bytecode`: the layers' checked-hash bytecode compiled by the base's python3 in a stage before (COMPILE_LAYERS),
    each layer then copied from there with its `.pyc`."""
    site = site_packages.rstrip("/")
    lines = ["# imgbuild image: its base, one COPY per imgbuild layer, then its metadata"]
    source = "${BASE}" if base_arg else base
    lines += [f"ARG BASE={base}"] if base_arg else []
    if bytecode and layers:
        lines += [f"FROM {source} AS bytecode"]
        lines += [f"COPY {LAYERS}/{name}/ {BYTECODE_DIR}/{name}/" for name in layers]
        run = ["python3", "-c", COMPILE_LAYERS, BYTECODE_DIR, site, *layers]
        lines += ["RUN " + json.dumps(run), f"FROM {source}"]
        lines += [f"COPY --from=bytecode {BYTECODE_DIR}/{name}/ {site}/" for name in layers]
    else:
        lines += [f"FROM {source}"]
        lines += [f"COPY {LAYERS}/{name}/ {site}/" for name in layers]
    env = list(env)
    if env:
        lines.append("ENV " + " \\\n    ".join(f"{_key(k)}={quote(v)}" for k, v in env))
    if labels:
        lines.append("LABEL " + " \\\n      ".join(f"{_key(k)}={quote(v)}" for k, v in sorted(labels.items())))
    lines += ["CMD []"] if keep_entrypoint else ["ENTRYPOINT []", "CMD []"]
    return "\n".join(lines) + "\n"


def layer_context(layers: Mapping[str, Mapping[str, bytes]]) -> dict[str, bytes]:
    """The context files of `layers` (name -> site-packages path -> bytes): `layers/<name>/<path>`."""
    return {f"{LAYERS}/{name}/{path}": data for name, files in layers.items() for path, data in files.items()}


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
        if path.startswith("/") or path == DOCKERFILE:  # tar_files refuses a `..`
            raise ValueError(f"bad context path {path!r}")
    return tar_files({DOCKERFILE: dockerfile.encode(), **files}, MTIME)


def listing(context: bytes) -> list[ContextEntry]:
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        return [ContextEntry(m.name, "dir" if m.isdir() else "file", m.mode, m.size) for m in tar.getmembers()]


def tar_files(files: Mapping[str, bytes], mtime: int) -> bytes:
    """A build context tar of `files` (relative paths without a leading /) and their parent directories:
    sorted, root-owned, 0755 dirs, 0644 files, one mtime."""
    entries: dict[str, bytes | None] = {}
    for name, data in files.items():
        pure = PurePosixPath(name.lstrip("/"))
        if ".." in pure.parts or not pure.parts:
            raise ValueError(f"bad context path {name!r}")
        for parent in pure.parents[:-1]:  # not "."
            entries.setdefault(str(parent), None)
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
