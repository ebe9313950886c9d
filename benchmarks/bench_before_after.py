"""The same whole commands from two source trees, interleaved: this checkout against an older one.

    git archive COMMIT src | tar -x -C /tmp/before
    python3 benchmarks/bench_before_after.py /tmp/before/src [--rounds 9] [--pairs noop mem check200]

- noop: `build latest engram-mem --base skeleton` with nothing changed (images under
  $IMGBUILD_BENCH_REPOSITORY, default imgbuild-bench/vllm-dsv41; built once, untimed, first);
- mem: `build engram-mem --no-smoke --base skeleton` with latest there and engram-mem's
  immutable tag removed before each run (the config-only image written and loaded);
- check200: `patches check --json` over a copy of the project with 200 small patches
  (many_patches.py).

Both sides share the cache ($IMGBUILD_CACHE), the project and the images; each has its own
warm bytecode cache. Reported: median, min-max, and after/before.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pairs import Pair, interleave, load, spread  # noqa: E402
from many_patches import make_project  # noqa: E402

from imgbuild.engine import Engine  # noqa: E402

REPO = os.environ.get("IMGBUILD_BENCH_REPOSITORY", "imgbuild-bench/vllm-dsv41")


def command(src: str, pycache: Path, args: list[str]) -> Callable[[], None]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=src, PYTHONPYCACHEPREFIX=str(pycache))

    def go() -> None:
        proc = subprocess.run([sys.executable, "-m", "imgbuild", *args], env=env, capture_output=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(args)} ({src}) failed: {proc.stderr.decode(errors='replace')[-600:]}")

    return go


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", help="the older tree's src/ directory")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--pairs", nargs="+", default=["noop", "check200"], choices=["noop", "mem", "check200"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-before-after-"))
    after = str(ROOT / "src")
    commands = {
        "noop": ["-C", str(ROOT), "build", "latest", "engram-mem", "--base", "skeleton", "--repository", REPO],
        "mem": ["-C", str(ROOT), "build", "engram-mem", "--no-smoke", "--base", "skeleton", "--repository", REPO],
        "check200": ["-C", str(work / "many"), "patches", "check", "--json"],
    }
    engine = Engine.connect()

    def drop_mem() -> None:  # untimed, before each mem run: its immutable tag (the moving one stays)
        for info in engine.labelled("imgbuild.variant", "engram-mem"):
            for tag in info.tags:
                if tag.startswith(f"{REPO}:0."):
                    engine.untag(tag)

    try:
        if "check200" in args.pairs:
            make_project(ROOT, work / "many", 200)
        if {"noop", "mem"} & set(args.pairs):
            command(after, work / "pyc-after", commands["noop"])()  # untimed: built and smoke-tested once
        print(f"start: {load()}; {args.rounds} interleaved rounds per pair")
        for name in args.pairs:
            pair = Pair(
                name,
                f"after: {' '.join(commands[name][2:4])}",
                command(after, work / "pyc-after", commands[name]),
                f"before: {' '.join(commands[name][2:4])}",
                command(args.before, work / "pyc-before", commands[name]),
                1.0,
                *((drop_mem, drop_mem) if name == "mem" else ()),
            )
            a, b = interleave(pair, args.rounds)
            ratio = statistics.median(a) / statistics.median(b)
            print(f"{name:<9} {pair.a_label:<28} {statistics.median(a):.3f} ({spread(a)})")
            print(f"{'':<9} {pair.b_label:<28} {statistics.median(b):.3f} ({spread(b)})  after/before {ratio:.2f}")
        print(f"end: {load()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
