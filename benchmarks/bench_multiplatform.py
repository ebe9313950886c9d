#!/usr/bin/env python3
"""Benchmark multi-platform builds on Docker 26 (containerd image store).

    DOCKER_HOST=unix:///run/docker26.sock python3 benchmarks/bench_multiplatform.py [--repeat 1] [--json]
        [--classic-host unix:///var/run/docker.sock]

With the real project and the skeleton stand-in as the base (offline), no smoke
test (the same qemu work either way), every build `--force` (no BuildKit cache):

1. `imgbuild build latest engram-mem --platform linux/arm64,linux/amd64`: one
   BuildKit call per image for both platforms, against two single-platform
   runs (`--platform linux/arm64`, then `--platform linux/amd64`), the way
   Docker 20.10 has to build them. With --classic-host, the two single-platform
   runs are also timed on that (20.10) daemon.
2. A `--force` rebuild of the multi-platform images: the time, and whether
   every digest (layers, per-platform manifests, indexes) came out equal.

Images go to the repository `imgbuild-bench/mp` and are removed before each
run and at the end. This is a script, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imgbuild.images.docker import Engine  # noqa: E402

REPO = "imgbuild-bench/mp"
BOTH = "linux/arm64,linux/amd64"


def imgbuild(platform: str, host: str | None = None) -> tuple[float, int]:
    """Seconds and buildx calls of one forced build of both variants."""
    env = {**os.environ, "IMGBUILD_ECHO": "1", "PYTHONPATH": str(ROOT / "src")}
    if host:
        env["DOCKER_HOST"] = host
    args = [sys.executable, "-m", "imgbuild", "-C", str(ROOT), "build", "latest", "engram-mem"]
    args += ["--base", "skeleton", "--repository", REPO, "--platform", platform, "--force", "--no-smoke"]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(args)}\n{proc.stderr[-3000:]}")
    return took, sum(1 for ln in proc.stderr.splitlines() if ln.startswith("+ ") and " buildx build " in ln)


def tags(engine: Engine) -> dict[str, str]:
    return {t: i.id for i in engine.client.images.list(name=REPO) for t in i.tags if t.startswith(REPO + ":")}


def clean(engine: Engine) -> None:
    ids = set(tags(engine).values())
    for tag in tags(engine):
        engine.untag(tag)
    for image_id in ids:  # the classic store keeps untagged images; the containerd store drops them with the name
        if engine.image(image_id) is not None:  # the benchmark's own images: removed with the SDK
            engine.client.api.remove_image(image_id, force=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--classic-host", help="also time the two single-platform runs on this (e.g. 20.10) daemon")
    opts = ap.parse_args()
    engine = Engine.connect()
    if not engine.features.modern:
        sys.exit(f"needs Docker 26+ with the containerd image store; {engine.features.describe()}")
    classic = None
    if opts.classic_host:
        os.environ["DOCKER_HOST"], saved = opts.classic_host, os.environ.get("DOCKER_HOST", "")
        classic = Engine.connect()
        os.environ["DOCKER_HOST"] = saved
    times: dict[str, list[float]] = {"one_call": [], "two_single": [], "force_rebuild": []}
    if classic:
        times["two_single_classic"] = []
    calls: dict[str, int] = {}
    equal = []
    for _ in range(opts.repeat):
        clean(engine)
        took, n = imgbuild(BOTH)
        times["one_call"].append(took)
        calls["one_call"] = n
        before = tags(engine)
        took, n = imgbuild(BOTH)
        times["force_rebuild"].append(took)
        equal.append(tags(engine) == before)
        clean(engine)
        arm, n1 = imgbuild("linux/arm64")
        amd, n2 = imgbuild("linux/amd64")
        times["two_single"].append(arm + amd)
        calls["two_single"] = n1 + n2
        clean(engine)
        if classic is not None:
            clean(classic)
            arm, n1 = imgbuild("linux/arm64", opts.classic_host)
            amd, n2 = imgbuild("linux/amd64", opts.classic_host)
            times["two_single_classic"].append(arm + amd)
            calls["two_single_classic"] = n1 + n2
            clean(classic)
    med = {k: round(statistics.median(v), 2) for k, v in times.items()}
    result = {
        "engine": engine.features.describe(),
        "classic_engine": classic.features.describe() if classic else None,
        "seconds_median": med,
        "buildx_calls": calls,
        "force_rebuild_digests_equal": all(equal),
        "ratio_two_single_over_one_call": round(med["two_single"] / med["one_call"], 2),
        "repeat": opts.repeat,
    }
    if classic:
        result["ratio_classic_two_single_over_one_call"] = round(med["two_single_classic"] / med["one_call"], 2)
    if opts.json:
        print(json.dumps(result, indent=2))
        return
    print(result["engine"])
    for k, v in med.items():
        print(f"  {k:22} {v:8.2f} s  ({calls.get(k, calls.get('one_call'))} buildx calls)")
    print(f"  two single-platform runs / one multi-platform run: {result['ratio_two_single_over_one_call']}x")
    if classic:
        print(f"  on {result['classic_engine']}: {result['ratio_classic_two_single_over_one_call']}x")
    print(f"  --force rebuild gives equal digests: {result['force_rebuild_digests_equal']}")


if __name__ == "__main__":
    main()
