"""Smoke's in-image cost, this checkout against an older one, interleaved (issue 13).

    git archive COMMIT src | tar -x -C /tmp/before
    python3 benchmarks/bench_smoke_probe.py /tmp/before/src [--rounds 5]

On the arm64 skeleton (under qemu on an amd64 host), images in $IMGBUILD_BENCH_REPOSITORY
(default imgbuild-bench-probe/vllm-dsv41). Each round runs, in rotating order, for both trees:
- smoke: `smoke REPO:latest --json` on the same image (built once, untimed): the whole
  command, and the probe container's own time (its run-directly check);
- build: `build latest engram-mem --force` with smoke, and with --no-smoke.
Reported: median and min-max of each, the smoke pair's ratio (with / without smoke;
issue 13's target: at most 2.0) for each tree, and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO = os.environ.get("IMGBUILD_BENCH_REPOSITORY", "imgbuild-bench-probe/vllm-dsv41")


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def runner(src: str, pycache: Path) -> Callable[[list[str]], str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=src, PYTHONPYCACHEPREFIX=str(pycache))

    def go(args: list[str]) -> str:
        proc = subprocess.run([sys.executable, "-m", "imgbuild", "-C", str(ROOT), *args], env=env, capture_output=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(args)} ({src}) failed: {proc.stderr.decode(errors='replace')[-600:]}")
        return proc.stdout.decode()

    return go


def probe_seconds(report: str) -> float:
    """The probe container's time, as smoke measured it (the run-directly check)."""
    (image,) = json.loads(report)["reports"]
    return next(c["seconds"] for c in image["checks"] if c["name"] == "run-directly")


def median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", help="the older tree's src/ directory")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-smoke-probe-"))
    trees = {"after": runner(str(ROOT / "src"), work / "pyc-after"), "before": runner(args.before, work / "pyc-before")}
    build = ["build", "latest", "engram-mem", "--force", "--base", "skeleton", "--platform", "linux/arm64"]
    build += ["--repository", REPO]
    steps: dict[str, list[str]] = {
        "smoke": ["smoke", f"{REPO}:latest", "--json"],
        "build+smoke": build,
        "build --no-smoke": [*build, "--no-smoke"],
    }
    times: dict[tuple[str, str], list[float]] = {(t, s): [] for t in trees for s in steps}
    probe: dict[str, list[float]] = {t: [] for t in trees}
    try:
        trees["after"](build)  # untimed: the base and both images exist, bytecode warm
        trees["before"](build)
        print(f"start: {load()}; {args.rounds} rounds, each tree and step once per round, order rotating")
        order = [(t, s) for s in steps for t in trees]
        for i in range(args.rounds):
            for tree, step in order[i % len(order) :] + order[: i % len(order)]:
                t0 = time.perf_counter()
                out = trees[tree](steps[step])
                times[(tree, step)].append(time.perf_counter() - t0)
                if step == "smoke":
                    probe[tree].append(probe_seconds(out))
            print(f"  round {i + 1}: {load()}", flush=True)
        print(f"\n{'':<7} {'step':<17} {'median s (min-max)':<22}")
        for tree in trees:
            for step in steps:
                print(f"{tree:<7} {step:<17} {median(times[(tree, step)])}")
            print(f"{tree:<7} {'probe container':<17} {median(probe[tree])}")
            ratio = statistics.median(times[(tree, "build+smoke")]) / statistics.median(
                times[(tree, "build --no-smoke")]
            )
            print(f"{tree:<7} {'smoke pair ratio':<17} {ratio:.2f} (target 2.0: {'ok' if ratio <= 2.0 else 'MISSES'})")
        print(f"end: {load()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
