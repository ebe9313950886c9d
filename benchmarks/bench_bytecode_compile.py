"""Issue 43: what the runtime base's bytecode costs a build (builder/runtime_bytecode.py), per platform's tree.

    python3 benchmarks/bench_bytecode_compile.py [--work DIR] [--out FILE]

Installs the amd64 and the arm64 lock's trees on the host (uv, hard links into its cache; untimed), then, with an
empty bytecode cache: compile_tree on the amd64 tree (cold: everything compiled, all cores), the same again on a
fresh install of the same tree (warm: everything from the cache, what a rebuild of the same lock pays), then on the
arm64 tree (the second platform: only the `.py` files that differ from amd64's compile). Each step's seconds,
modules, compiled / from the cache / not compilable, and the bytes of `.pyc` it added to the tree. One run, not
interleaved (each step needs the one before); the load is printed with each step."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imgbuild.builder import runtime_base as rb  # noqa: E402
from imgbuild.builder import runtime_bytecode as B  # noqa: E402
from imgbuild.builder import runtime_lock as rl  # noqa: E402
from imgbuild.platforms import Platform  # noqa: E402

SITE = "/usr/local/lib/python3.12/dist-packages"


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def pyc_bytes(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*.pyc"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-bytecode-"))
    cache = work / "cache"
    (cache / "runtime").mkdir(parents=True, exist_ok=True)
    compiler = B.find_compiler(rl.PYTHON_VERSION)
    lines = [
        f"compiler: {compiler.python} ({compiler.describe()}); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    ]
    steps = [("amd64 cold", "linux/amd64"), ("amd64 warm", "linux/amd64"), ("arm64 after amd64", "linux/arm64")]
    for i, (name, plat) in enumerate(steps):
        platform = Platform.parse(plat)
        lock = rl.load_lock(ROOT, platform)
        tree = work / f"tree{i}" / "tree"
        tree.parent.mkdir(parents=True)
        rb.install_tree(lock, tree)
        before = load()
        made = B.compile_tree(tree, SITE, cache, compiler)
        lines.append(
            f"{name:18} {made.seconds:7.1f} s  modules {made.modules:6d}  compiled {made.compiled:6d}  "
            f"from cache {made.cached:6d}  not compilable {made.refused:3d}  .pyc {pyc_bytes(tree) / 1e6:6.0f} MB  "
            f"({before} -> {load()})"
        )
        print(lines[-1], flush=True)
        shutil.rmtree(tree.parent)
    store = B.cache_dir(cache, compiler)
    size = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    lines.append(f"bytecode cache after both platforms: {size / 1e6:.0f} MB ({store})")
    text = "\n".join(lines) + "\n"
    print(lines[-1])
    if args.out:
        args.out.write_text(text)
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
