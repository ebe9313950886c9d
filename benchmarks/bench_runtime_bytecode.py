"""Issue 43: a cold `import vllm` plus the planned modules on the runtime base with its bytecode (checked-hash
`.pyc` in the package layers) and without (the base before issue 43), interleaved.

    python3 benchmarks/bench_runtime_bytecode.py --with IMAGE --without IMAGE [--rounds 5] [--out FILE]

Cold: each run is a fresh container (`docker run --rm`), so the only `.pyc` files there are the image's own; the
container proves it: it counts the `.pyc` files under site-packages/vllm before the import (0 without bytecode, the
image's with it) and after (without: the ones the import wrote; with: the same, nothing compiled). The page cache
is NOT dropped (a shared machine: dropping it would slow the other users' runs); one untimed run of each image
first puts both images' files in it alike. Inside the container the import runs twice in two processes: the
first is the cold one; the second finds what the first wrote (without bytecode: the `.pyc` files it compiled).
Timed: each process in the container (perf_counter around it) and the whole `docker run` on the host.
Rounds alternate the order (with, without; then without, with)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = "/usr/local/lib/python3.12/dist-packages"
MODULES = (  # the planned modules of the seed images (bench_real_size.py --check prints the same 8)
    "flashinfer.mla._sparse_mla_sm120._policy",
    "vllm.model_executor.layers.sparse_attn_indexer",
    "vllm.model_executor.model_loader.weight_utils",
    "vllm.models.deepseek_v41.attention",
    "vllm.models.deepseek_v41.common.engram",
    "vllm.models.deepseek_v41.nvidia.flashinfer_sparse",
    "vllm.models.deepseek_v41.nvidia.model_state",
    "vllm.v1.attention.backends.mla.sparse_swa",
)
IN_CONTAINER = r"""
import os, subprocess, sys, time
site, stmt = sys.argv[1], sys.argv[2]
def pycs():
    return sum(n.endswith(".pyc") for _, _, names in os.walk(os.path.join(site, "vllm")) for n in names)
init = os.path.join(site, "vllm", "__pycache__", "__init__.cpython-311.pyc")
flags = int.from_bytes(open(init, "rb").read()[4:8], "little") if os.path.exists(init) else None
before = pycs()
times = []
for _ in range(2):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", stmt], check=True)
    times.append(time.perf_counter() - t)
    if len(times) == 1:
        after = pycs()
print(before, after, flags, *times)
"""


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def run(image: str) -> tuple[float, list[float]]:
    stmt = "import vllm, " + ", ".join(MODULES)
    t = time.perf_counter()
    done = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "python3", image, "-c", IN_CONTAINER, SITE, stmt],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{image}: {done.stderr[-2000:]}")
    before, after, flags, first, second = done.stdout.split()
    return wall, [float(before), float(after), -1.0 if flags == "None" else float(flags), float(first), float(second)]


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--with", dest="with_", required=True, help="the runtime base with bytecode")
    ap.add_argument("--without", required=True, help="the runtime base without bytecode (the same lock)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    images = {"with": args.with_, "without": args.without}
    lines = [f"start: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, {load()}, {args.rounds} rounds"]
    for name, image in images.items():
        run(image)  # untimed: the page cache holds both images' files alike
        lines.append(f"{name}: {image} (one untimed run first)")
    got: dict[str, list[tuple[float, list[float]]]] = {n: [] for n in images}
    for r in range(args.rounds):
        order = list(images) if r % 2 == 0 else list(reversed(images))
        for name in order:
            got[name].append(run(images[name]))
        lines.append(f"  round {r + 1} ({', '.join(order)}): {load()}")
    lines.append("")
    lines.append(f"{'':8} {'.pyc before':>11} {'after':>6} {'flags':>5}  {'first process s':>20}  "
                 f"{'second process s':>20}  {'docker run s':>20}")  # fmt: skip
    for name in images:
        walls = [w for w, _ in got[name]]
        inner = [x for _, x in got[name]]
        before, after, flags = inner[0][0], inner[0][1], inner[0][2]
        assert all(x[:3] == [before, after, flags] for x in inner), inner  # every round as cold as the first
        lines.append(
            f"{name:8} {before:11.0f} {after:6.0f} {flags:5.0f}  {med([x[3] for x in inner]):>20}  "
            f"{med([x[4] for x in inner]):>20}  {med(walls):>20}"
        )
    ratio = statistics.median(x[3] for _, x in got["without"]) / statistics.median(x[3] for _, x in got["with"])
    lines.append(f"first process: without / with = {ratio:.2f}x")
    lines.append(f"end: {load()}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
