"""Engram-on-disk staging: the host's own work per step, warm, on a CPU.

What ``EngramDiskStager.stage_hashes`` does on the host once a step's hash ids
are there (select each layer's rows, probe the page cache, gather the rows,
hand the spans to the copies), timed on this machine's CPU without a GPU:
the device buffers are stand-ins whose ``copy_`` does nothing (on a GPU it
only enqueues a DMA), and the dequantize launch is not run. The patched
definitions are compiled from a patched ``engram.py`` the way the release tier
loads them (``tests/release/sm12x/conftest.py``), so two files side by side
(``--sources A --sources B``) are timed in interleaved rounds on the same
tables and hash ids.

Tables: 2 layers x 24 heads x ~200K buckets (4.8M rows of 256 bytes, 1.2 GB
each, the GPU bench's shape), written once under ``BENCH_DIR`` and read in
whole first, so every step is warm (``mincore`` 100% checked).

    python3 tests/gpu/collect_sources.py /tmp/engram-src
    python3 benchmarks/bench_engram_host.py --sources /tmp/engram-src/patched/engram.py
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import mmap
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.release.sm12x.conftest import PatchedSource

LAYERS = 2
HEADS = 24
BUCKETS = 200_000
DIM = 256
QUANT_BLOCK = 32
NAMES = (
    "ENGRAM_IO_THREADS_ENV",
    "ENGRAM_IO_THREADS_DEFAULT",
    "_engram_io_pool",
    "_engram_io_pool_lock",
    "engram_io_pool",
    "ENGRAM_ROWS_PER_TASK",
    "_ENGRAM_PAGE",
    "ENGRAM_PROBE_ROWS",
    "ENGRAM_PROBE_ROWS_LARGE",
    "_ENGRAM_PROBE_MIX",
    "ENGRAM_MERGE_GAP_PAGES",
    "ENGRAM_HINT_PAGES",
    "ENGRAM_HINTS_PER_TASK",
    "ENGRAM_PREFETCH_MODE",
    "_engram_io_workers",
    "engram_gather_spans",
    "_engram_libc",
    "_libc",
    "_close_fds",
    "EngramDiskTable",
    "EngramDiskSlot",
    "EngramDiskStager",
)
STEPS = {"decode-8x1": 8, "decode-64x1": 64, "verify-8x6": 48, "prefill-8192": 8192}


class NoCopy:
    """A device buffer stand-in: slicing and ``copy_`` cost a call, no bytes."""

    def __getitem__(self, _: Any) -> NoCopy:
        return self

    def copy_(self, *_: Any, **__: Any) -> None:
        return None


def load(path: Path, pool: ThreadPoolExecutor) -> dict[str, Any]:
    cuda = SimpleNamespace(is_available=lambda: False)
    torch_cpu = SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    torch_cpu.cuda = cuda
    namespace = dict(
        os=os,
        np=np,
        ctypes=ctypes,
        mmap=mmap,
        torch=torch_cpu,
        nn=torch.nn,
        threading=threading,
        weakref=weakref,
        glob=glob,
        json=json,
        re=re,
        Future=Future,
        ThreadPoolExecutor=ThreadPoolExecutor,
        triton=SimpleNamespace(cdiv=lambda a, b: -(-a // b)),
    )
    names = [n for n in NAMES if n in _top_names(path)]
    scope = PatchedSource(path.parent).load(path.name, names, namespace)
    scope["_engram_io_pool"] = pool
    return scope


def _top_names(path: Path) -> set[str]:
    import ast

    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update(t.id for t in targets if isinstance(t, ast.Name))
    return found


def write_tables(root: Path) -> list[tuple[str, str]]:
    rows = HEADS * BUCKETS
    rng = np.random.default_rng(46)
    paths = []
    chunk = rng.integers(0, 256, (1 << 24,), dtype=np.uint8)
    for layer in range(LAYERS):
        weight, scale = root / f"l{layer}.weight.bin", root / f"l{layer}.scale.bin"
        with open(weight, "wb") as f:
            left = rows * DIM
            while left:
                n = min(left, chunk.size)
                f.write(chunk[:n].tobytes())
                left -= n
        rng.integers(0, 256, (rows, DIM // QUANT_BLOCK), dtype=np.uint8).tofile(scale)
        paths.append((str(weight), str(scale)))
    return paths


def warm_up(table: Any) -> float:
    """Read the whole rows file through the page cache; the resident share."""
    with open(table.paths[0], "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass
    pages = (table.sizes[0] + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = np.zeros(pages, dtype=np.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    address, size = ctypes.c_void_p(table._address), ctypes.c_size_t(table.sizes[0])
    if libc.mincore(address, size, vec.ctypes.data_as(ctypes.c_void_p)):
        raise OSError(ctypes.get_errno(), "mincore")
    return float((vec & 1).mean())


def make_stager(scope: dict[str, Any], paths: list[tuple[str, str]], pool: ThreadPoolExecutor) -> Any:
    slots = []
    for layer, (weight, scale) in enumerate(paths):
        table = scope["EngramDiskTable"](weight, scale, HEADS * BUCKETS, DIM, QUANT_BLOCK, 0, HEADS * BUCKETS)
        out = torch.empty((8192, HEADS, DIM), dtype=torch.uint8)
        slot = scope["EngramDiskSlot"](table, layer, 0, HEADS, HEADS, 0, HEADS * BUCKETS, QUANT_BLOCK, out)
        slot.values = slot.scales = slot.ids = NoCopy()
        # On a GPU a gather done on the calling thread is read in place (UVA).
        slot.host_views = (NoCopy(), NoCopy(), NoCopy())
        slots.append(slot)
    stager = scope["EngramDiskStager"](None, slots, LAYERS, HEADS)
    stager.pool = pool
    return stager


def hash_ids(tokens: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    offsets = np.arange(HEADS, dtype=np.int64) * BUCKETS
    ids = rng.integers(0, BUCKETS, (tokens, LAYERS, HEADS)) + offsets
    return ids.astype(np.int32)


def wrap_parts(stager: Any, spent: dict[str, float]) -> list[tuple[Any, str]]:
    undo = []

    def wrap(obj: Any, name: str) -> None:
        orig = getattr(obj, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            t = time.thread_time()
            try:
                return orig(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - t

        setattr(obj, name, call)
        undo.append((obj, name))

    for slot in stager.slots:
        wrap(slot, "select")
        wrap(slot, "upload")
        wrap(slot.table, "prefetch")
        wrap(slot.table, "read_rows")
    return undo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=Path, action="append", required=True, help="a patched engram.py (repeatable)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--steps-per-round", type=int, default=200, help="steps timed per round (prefill: /50)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pool = ThreadPoolExecutor(args.threads, thread_name_prefix="bench-io")
    labels = [f"{i}:{p}" for i, p in enumerate(args.sources)]
    results: dict[str, Any] = {"cpus": os.cpu_count(), "threads": args.threads, "rounds": args.rounds, "steps": {}}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        paths = write_tables(Path(tmp))
        stagers = {
            label: make_stager(load(p, pool), paths, pool) for label, p in zip(labels, args.sources, strict=True)
        }
        first = next(iter(stagers.values()))
        results["resident"] = [warm_up(slot.table) for slot in first.slots]
        print(f"# tables resident (mincore): {results['resident']}, cpus {os.cpu_count()}, pool {args.threads}")
        for name, tokens in STEPS.items():
            hashes = [hash_ids(tokens, seed) for seed in range(16)]
            n = max(4, args.steps_per_round // 50) if tokens > 1024 else args.steps_per_round
            samples: dict[str, list[float]] = {label: [] for label in stagers}
            cpu: dict[str, list[float]] = {label: [] for label in stagers}
            parts: dict[str, dict[str, list[float]]] = {label: {} for label in stagers}
            for stager in stagers.values():
                for h in hashes[:4]:
                    stager.stage_hashes(h)
            for _ in range(args.rounds):
                for label, stager in stagers.items():
                    start, start_cpu = time.perf_counter(), time.process_time()
                    for i in range(n):
                        stager.stage_hashes(hashes[i % len(hashes)])
                    samples[label].append((time.perf_counter() - start) / n * 1e6)
                    cpu[label].append((time.process_time() - start_cpu) / n * 1e6)
            for _ in range(args.rounds):
                for label, stager in stagers.items():
                    spent: dict[str, float] = {}
                    undo = wrap_parts(stager, spent)
                    try:
                        for i in range(n):
                            stager.stage_hashes(hashes[i % len(hashes)])
                    finally:
                        for obj, attr in undo:
                            delattr(obj, attr)
                    for k, v in spent.items():
                        parts[label].setdefault(k, []).append(v / n * 1e6)
            row = {}
            for label in stagers:
                s, c = sorted(samples[label]), sorted(cpu[label])
                row[label] = {
                    "median_us": statistics.median(s),
                    "min_us": s[0],
                    "max_us": s[-1],
                    "cpu_median_us": statistics.median(c),
                    "cpu_min_us": c[0],
                    "cpu_max_us": c[-1],
                    "parts_thread_cpu_us": {k: statistics.median(v) for k, v in parts[label].items()},
                }
                part = "  ".join(f"{k}={v:.1f}" for k, v in row[label]["parts_thread_cpu_us"].items())
                print(
                    f"{name}: {label}: stage_hashes wall {row[label]['median_us']:.1f} us [{s[0]:.1f}-{s[-1]:.1f}], "
                    f"CPU (all threads) {row[label]['cpu_median_us']:.1f} us [{c[0]:.1f}-{c[-1]:.1f}] "
                    f"over {args.rounds} rounds of {n}; parts, the calling thread's CPU "
                    f"(median of {args.rounds} more rounds): {part}"
                )
            results["steps"][name] = row
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
