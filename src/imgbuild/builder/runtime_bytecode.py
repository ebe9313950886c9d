"""The runtime base's bytecode: a checked-hash `.pyc` beside every module of the installed tree, compiled once per
source file and kept in imgbuild's cache, so that the package layers carry it (each `.pyc` goes to the layer of
the module it belongs to: `runtime_layers.split`).

Why: without bytecode every container compiles what it imports (issue 43: 18.5 s for the planned modules in a
first process, 6.1 s in a second that found the `.pyc` files). The stock image has bytecode too (vLLM's Dockerfile
sets UV_COMPILE_BYTECODE=1), in timestamp mode; here it is checked-hash, which holds no mtime (equal inputs, equal
layer digests) and which a patch layer's own `.pyc` (plan/bytecode.py) replaces at the same path.

Which python compiles: one of the base's own Python version (`runtime_lock.PYTHON_VERSION`, bookworm's python3),
on the host. A checked-hash `.pyc` is the magic number, the flags, the source's hash and the marshalled code
object: none of it depends on the machine, so the amd64 host's python gives the bytes the arm64 base's python
would give under qemu (tests/docker/test_runtime_bytecode.py compares them) at a fraction of the time. The code
object's file name is the module's path in the image (`dfile`), as the image's python would have written it.

The cache: `<cache>/runtime/bytecode/<cache tag>-<magic>/` holds one file per (source bytes, path in the image,
compiler version, mode), named by a digest of them; a source the compiler refuses (a template, Python 2 code in a
wheel's test data) is an empty file there and gets no `.pyc` (as `compileall` and uv leave it). This is finer than
one entry per wheel: the other platform's wheel of the same release (vLLM, torch: their `.py` files are the
same) compiles nothing again. Entries are only added; `rm -r <cache>/runtime/bytecode` frees them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from imgbuild import proc
from imgbuild.errors import DockerError

MODE = "checked-hash"
FORMAT = "imgbuild-bytecode/1"

# Run by the compiling python: `-c PROBE` prints what identifies it; `-c COMPILE JOBS WORKERS` compiles each job
# ([source, path in the image, output]) in WORKERS processes, an empty output where the source does not compile.
PROBE = r"""
import importlib.util, json, platform, sys
print(json.dumps({"cache_tag": sys.implementation.cache_tag, "magic": importlib.util.MAGIC_NUMBER.hex(),
                  "version": platform.python_version()}))
"""
COMPILE = r"""
import json, os, py_compile, sys
from concurrent.futures import ProcessPoolExecutor

def one(job):
    src, dfile, out = job
    try:
        py_compile.compile(src, cfile=out, dfile=dfile, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        return 1
    except (py_compile.PyCompileError, SyntaxError, ValueError):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        tmp = out + ".new"
        open(tmp, "wb").close()
        os.replace(tmp, out)
        return 0

if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        jobs = json.load(fh)
    with ProcessPoolExecutor(int(sys.argv[2])) as pool:
        done = sum(pool.map(one, jobs, chunksize=64))
    print(json.dumps({"compiled": done, "refused": len(jobs) - done}))
"""


@dataclass(frozen=True)
class Compiler:
    python: str  # the interpreter's path on the host
    cache_tag: str  # cpython-311
    magic: str  # importlib.util.MAGIC_NUMBER, hex
    version: str  # 3.11.7

    def describe(self) -> str:
        """What identifies the bytes it writes, in the layers' cache keys (the patch release too, to be safe)."""
        return f"{MODE} {self.cache_tag} magic {self.magic} python {self.version}"

    def label(self) -> str:
        """The base's label: mode, tag and magic number, not the host's patch release (3.11.2 and 3.11.7 write the
        same bytes: tests/docker/test_runtime_bytecode.py), so that two machines make the same image config."""
        return f"{MODE} {self.cache_tag} magic {self.magic}"


@dataclass(frozen=True)
class Compiled:
    modules: int  # .py files in the tree
    compiled: int  # compiled this time
    cached: int  # taken from the cache
    refused: int  # no bytecode: the source does not compile
    seconds: float


def find_compiler(version: str) -> Compiler:
    """A python `version` (major.minor) on the host: imgbuild's own if it is that version, else `python<version>`
    on PATH. None: an error naming the fix."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [sys.executable] if here == version else []
    found = shutil.which(f"python{version}")
    candidates += [found] if found else []
    for python in candidates:
        done = proc.run([python, "-c", PROBE], text=True)
        if done.returncode == 0:
            info = json.loads(done.stdout)
            if info["version"].rsplit(".", 1)[0] == version:
                return Compiler(python, info["cache_tag"], info["magic"], info["version"])
    raise DockerError(
        f"no python {version} on this machine to compile the runtime base's bytecode with (imgbuild runs on "
        f"{here}; the base's python is {version}, and bytecode is per Python version)",
        hint=f"install python{version} (Debian: `apt-get install python{version}`): `python{version}` on PATH",
    )


def pyc_name(source: str, cache_tag: str) -> str:
    """The path the import system looks for a source's bytecode at (importlib.util.cache_from_source), relative."""
    head, _, name = source.rpartition("/")
    return f"{head}/__pycache__/{name[:-3]}.{cache_tag}.pyc" if head else f"__pycache__/{name[:-3]}.{cache_tag}.pyc"


def modules(tree: Path, skip: tuple[str, ...] = ("bin",)) -> list[str]:
    """The `.py` files of the installed tree, relative, sorted; those under `skip` (console scripts) left out."""
    out = []
    for root, dirs, files in os.walk(tree):
        rel = Path(root).relative_to(tree)
        if rel.parts and (rel.parts[0] in skip or "__pycache__" in rel.parts):
            dirs.clear()
            continue
        out += [(rel / f).as_posix() for f in files if f.endswith(".py") and not (Path(root) / f).is_symlink()]
    return sorted(out)


def entry_key(compiler: Compiler, image_path: str, source: bytes) -> str:
    parts = [FORMAT, MODE, compiler.cache_tag, compiler.magic, compiler.version, image_path]
    return hashlib.sha256("\n".join(parts).encode() + b"\n" + hashlib.sha256(source).digest()).hexdigest()


def cache_dir(cache: Path, compiler: Compiler) -> Path:
    return cache / "runtime" / "bytecode" / f"{compiler.cache_tag}-{compiler.magic}"


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def compile_tree(
    tree: Path, site_packages: str, cache: Path, compiler: Compiler, *, workers: int | None = None
) -> Compiled:
    """Put a checked-hash `.pyc` beside every module of `tree` (installed at `site_packages` in the image): from
    the cache where it has one, else compiled (in `workers` processes: all cores by default) and kept there."""
    start = time.monotonic()
    store = cache_dir(cache, compiler)
    wanted: list[tuple[str, Path]] = []  # (module, its cache entry)
    jobs: list[list[str]] = []
    for rel in modules(tree):
        src = tree / rel
        image_path = f"{site_packages.rstrip('/')}/{rel}"
        key = entry_key(compiler, image_path, src.read_bytes())
        entry = store / key[:2] / key[2:]
        wanted.append((rel, entry))
        if not entry.is_file():
            jobs.append([str(src), image_path, str(entry)])
    refused = 0
    if jobs:
        store.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".jobs-", dir=store) as tmp:
            listed = Path(tmp) / "jobs.json"
            listed.write_text(json.dumps(jobs))
            done = proc.run([compiler.python, "-c", COMPILE, str(listed), str(workers or os.cpu_count() or 1)],
                            text=True)  # fmt: skip
            if done.returncode != 0:
                tail = "\n".join((done.stderr or "").strip().splitlines()[-10:])
                raise DockerError(f"compiling the runtime base's bytecode with {compiler.python} failed:\n{tail}")
            refused = json.loads(done.stdout.strip().splitlines()[-1])["refused"]
    for rel, entry in wanted:
        if entry.stat().st_size:
            _link(entry, tree / pyc_name(rel, compiler.cache_tag))
    cached = len(wanted) - len(jobs)
    return Compiled(len(wanted), len(jobs) - refused, cached, refused, time.monotonic() - start)
