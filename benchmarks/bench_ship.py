#!/usr/bin/env python3
"""Benchmark `imgbuild ship` against `docker save IMAGE | docker -H NODE load`.

    python3 benchmarks/bench_ship.py PROJECT_DIR [--json]

PROJECT_DIR holds the project whose `latest` and `engram-mem` images are
built locally (e.g. a copy of this repository, built with
`imgbuild build latest engram-mem --base skeleton`). A second dockerd stands
for the node (tests/support/node_daemon.py: own data root, socket and bridge), fresh
for each measurement, with the base image already loaded, as a cluster node
has it. Measured, per variant and for both in sequence:

- `docker save IMAGE | docker -H NODE load`: bytes through the pipe, seconds;
- `imgbuild ship VARIANT --to NODE`: bytes sent (from its JSON), seconds.

This is a script, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tests.support.node_daemon import Node, node_daemon

from imgbuild.images.docker import Engine


def pipe_save_load(image: str, node: Node) -> tuple[int, float]:
    started = time.perf_counter()
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    load = subprocess.Popen(["docker", "-H", node.socket, "load"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert save.stdout is not None and load.stdin is not None
    total = 0
    while chunk := save.stdout.read(1 << 20):
        total += len(chunk)
        load.stdin.write(chunk)
    load.stdin.close()
    if save.wait() != 0 or load.wait() != 0:
        raise SystemExit("docker save | docker load failed")
    return total, time.perf_counter() - started


def ship(project: Path, variant: str, node: Node) -> tuple[int, float]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(project), "ship", variant, "--to", node.socket, "--json"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")},
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"ship failed: {proc.stdout}{proc.stderr}")
    return int(json.loads(proc.stdout)["nodes"][0]["bytes_sent"]), seconds


def base_of(engine: Engine, image: str) -> str:
    return engine.require(image).labels["org.opencontainers.image.base.name"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    project = args.project.resolve()
    import yaml

    repo = yaml.safe_load((project / "images" / "latest.yaml").read_text())["image"]["repository"]
    images = {"latest": f"{repo}:latest", "engram-mem": f"{repo}:engram-mem"}
    engine = Engine.connect()
    base = base_of(engine, images["latest"])
    rows = []
    for method in ("save|load", "ship"):
        with (
            tempfile.TemporaryDirectory(prefix="bench-ship-") as tmp,
            node_daemon(Path(tmp) / "n", "br14bench") as node,
        ):
            pipe_save_load(base, node)  # the node has the base, as cluster nodes do
            for variant in ("latest", "engram-mem"):
                sent, seconds = (
                    pipe_save_load(images[variant], node) if method == "save|load" else ship(project, variant, node)
                )
                rows.append({"method": method, "variant": variant, "bytes": sent, "seconds": round(seconds, 3)})
    full = {v: engine.require(i).size for v, i in images.items()}
    if args.json:
        print(json.dumps({"image_sizes": full, "rows": rows}, indent=2))
        return
    print(f"base {base}; image sizes: " + ", ".join(f"{v} {s / 1e6:.1f} MB" for v, s in full.items()))
    print(f"{'method':<10} {'variant':<11} {'bytes':>14} {'seconds':>8}")
    for r in rows:
        print(f"{r['method']:<10} {r['variant']:<11} {r['bytes']:>14,} {r['seconds']:>8.2f}")


if __name__ == "__main__":
    main()
