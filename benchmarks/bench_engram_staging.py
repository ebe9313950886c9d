"""Engram-on-disk staging per step on a CUDA GPU, warm and cold, side by side
with the release's pinned-host lookup and with what the disk itself does for
the same pages, all in one run on the same files:

- ``warm``: the step's table pages are in the page cache;
- ``cold``: before every timed step the tables are evicted for real (their
  pages unmapped from this process with ``madvise(MADV_DONTNEED)``, then
  dropped with ``posix_fadvise(DONTNEED)``) and ``mincore`` must report 0%
  of them resident, else the run stops;
- ``cold, no prefetch``: the same with ``EngramDiskTable.prefetch`` turned
  off, i.e. pages faulted in one by one as before this change;
- ``floor``: ``benchmarks/disk_floor.c`` reading the step's distinct pages
  (4 KiB each) at queue depth 1 and at high queue depths, the same pages with
  adjacent ones merged into one read per run, and each weight file
  sequentially, every run from an emptied page cache (mincore 0%); at the end
  ``engram_floor.py`` sets each cold step against these and against the step's
  bytes at the sequential bandwidth.

Each step is timed from the call to the end of its GPU work (host wall time,
``torch.cuda.synchronize`` included): median and range. Also measured: how
long ``stage()`` (what the V2 runner's ``prepare_inputs`` calls) holds the host
while 20 ms of unrelated GPU work is queued, against the release, whose
lookup the host only enqueues.

    python3 tests/gpu/collect_sources.py /tmp/engram-src
    gcc -O2 -pthread -o /tmp/disk_floor benchmarks/disk_floor.c
    python3 benchmarks/bench_engram_staging.py --sources /tmp/engram-src \\
        --floor-tool /tmp/disk_floor --json out.json
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import engram_floor
from tests.gpu.engram_harness import (
    PAGE,
    Shape,
    env,
    evict,
    hash_batch,
    layout_config,
    load_engram,
    make_batch,
    make_engram,
    make_hash_state,
    read_pages,
    resident_pages,
    spec_verify_steps,
    write_checkpoint,
)

SHAPE = Shape()
# Cold prefill variants (issue 46 item 1): merge gap in pages, pages per
# request, ENGRAM_PREFETCH_MODE and pool threads. Earlier leases swept gaps
# of 2-64 pages with hints from the calling thread and 512 KiB-2 MiB
# requests (issue46-h100-i46b-bench1.txt); these ask for fewer bytes from
# the pool's threads.
SWEEP = [
    (0, 32, "pool-hint", 8),
    (1, 32, "pool-hint", 8),
    (2, 32, "pool-hint", 8),
    (2, 32, "pool-hint", 16),
    (4, 32, "pool-hint", 16),
]
# Warm variants for a mid-size step: its gather split over the pool in
# tasks of at least this many rows (ENGRAM_ROWS_PER_TASK; the default
# splits from 32768 rows a layer).
WARM_SPLITS = (384, 768)


def timed(fn: Callable[[], None]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1e3 for s in samples)
    return {"median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1], "n": len(ms)}


def mount_of(path: Path) -> str:
    best = ("", "")
    for line in Path("/proc/mounts").read_text().splitlines():
        _, point, fstype, *_ = line.split()
        if str(path).startswith(point) and len(point) > len(best[0]):
            best = (point, fstype)
    return f"{best[0]} ({best[1]})"


def build(sources: Path, root: Path, baseline: Path | None = None) -> dict[str, Any]:
    release = load_engram(sources / "release" / "engram.py", "engram_release")
    patched = load_engram(sources / "patched" / "engram.py", "engram_patched")
    config = layout_config(SHAPE, release)
    layout = release.EngramLayout(config)
    (root / "ckpt").mkdir()
    tables = write_checkpoint(root / "ckpt" / "model.safetensors", config, SHAPE)
    table_dir = root / "tables"
    patched.export_engram_tables(str(root / "ckpt"), str(table_dir))
    os.remove(root / "ckpt" / "model.safetensors")
    os.sync()
    hbm = [make_engram(release, layout, config, i, "hbm", None, tables) for i in range(len(SHAPE.layer_ids))]
    host = [make_engram(release, layout, config, i, "host", None, tables, reference=hbm[i]) for i in range(len(hbm))]
    disk = [
        make_engram(patched, layout, config, i, "disk", table_dir, tables, reference=hbm[i]) for i in range(len(hbm))
    ]
    with env(DSV41_ENGRAM_DISK="1", DSV41_ENGRAM_DIR=str(table_dir)):
        stager = patched.EngramDiskStager.create(nn.ModuleList([make_hash_state(patched, layout, SHAPE), *disk]))
    before = None
    if baseline is not None:
        # Another patched engram.py (an earlier commit's) on the same table
        # files, timed warm beside this one: a speed-up measured in one lease.
        old = load_engram(baseline, "engram_baseline")
        old_disk = [
            make_engram(old, layout, config, i, "disk", table_dir, tables, reference=hbm[i]) for i in range(len(hbm))
        ]
        with env(DSV41_ENGRAM_DISK="1", DSV41_ENGRAM_DIR=str(table_dir)):
            before = old.EngramDiskStager.create(nn.ModuleList([make_hash_state(old, layout, SHAPE), *old_disk]))
    del hbm
    return {
        "before": before,
        "patched": patched,
        "release": release,
        "hash_release": make_hash_state(release, layout, SHAPE),
        "host": host,
        "stager": stager,
        "disk": disk,
        "tables": [slot.table for slot in stager.slots],
    }


# The --baseline stager's tables: their mappings hold the same files' pages,
# which posix_fadvise(DONTNEED) leaves alone while mapped, so they are
# unmapped first.
UNMAP_FIRST: list[Any] = []


def cold(tables: list[Any]) -> None:
    for table in UNMAP_FIRST:
        table.mapping.madvise(mmap.MADV_DONTNEED)
    left = evict(tables)
    if left != 0.0:
        raise SystemExit(f"the page cache kept {left:.1%} of a table after eviction: no cold measurement")


def step_pages(w: dict[str, Any], batch: Any) -> dict[str, Any]:
    """The step's rows and distinct weight-file pages, per table, as the
    stager computes them (after staging `batch`)."""
    stager = w["stager"]
    stager.stage(batch.input_ids, batch.positions, batch.query_start_loc, batch.lookback)
    torch.cuda.synchronize()
    hashes = stager._host_hashes_np[: batch.num_tokens]
    pairs, hinted, rows_total, rows_distinct, pages_total = [], [], 0, 0, 0
    per_table: list[np.ndarray] = []
    for index, slot in enumerate(stager.slots):
        rows = slot.select(hashes[:, slot.layer_hash_index])
        pages = np.unique(slot.table._pages(rows))  # disk_floor's runs mode needs them sorted
        rows_total += rows.size
        rows_distinct += np.unique(rows).size
        pages_total += pages.size
        per_table.append(pages)
        pairs.append(np.stack([np.full(pages.size, index, np.int64), pages.astype(np.int64) * PAGE], axis=1))
        gap = w["patched"].ENGRAM_MERGE_GAP_PAGES
        cut = np.flatnonzero(np.diff(pages) > gap + 1)
        firsts = pages[np.concatenate(([0], cut + 1))].tolist()
        lasts = pages[np.concatenate((cut, [pages.size - 1]))].tolist()
        joined = np.concatenate([np.arange(a, b + 1) for a, b in zip(firsts, lasts, strict=True)])
        hinted.append(np.stack([np.full(joined.size, index, np.int64), joined.astype(np.int64) * PAGE], axis=1))
    return {
        "rows": rows_total,
        "distinct_rows": rows_distinct,
        "pages": pages_total,
        "list": np.concatenate(pairs),
        "hinted_list": np.concatenate(hinted),
        "pages_per_table": per_table,
    }


def floor(tool: Path, args: list[str], tables: list[Any]) -> dict[str, Any]:
    cold(tables)
    paths = [table.paths[0] for table in tables]
    out = subprocess.run([str(tool), *args, *paths], check=True, capture_output=True, text=True).stdout
    found: dict[str, Any] = json.loads(out)
    found["ms"] = found["seconds"] * 1e3
    return found


def breakdown(stager: Any, run: Callable[[], None], repeat: int) -> dict[str, float]:
    """Mean host time per step in each part of stage() (warm), by wrapping
    the stager's, slots' and tables' methods on the instances."""
    spent: dict[str, float] = {}
    undo = []

    def wrap(obj: Any, name: str, key: str) -> None:
        orig = getattr(obj, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - start

        setattr(obj, name, timed_call)
        undo.append((obj, name))

    wrap(stager, "stage_hashes", "stage_hashes (all below but dequantize)")
    for slot in stager.slots:
        wrap(slot, "select", "select")
        wrap(slot, "upload", "upload (waits for pool reads)")
        wrap(slot, "dequantize", "dequantize launch")
        wrap(slot.table, "prefetch", "probe + prefetch")
        wrap(slot.table, "read_rows", "read_rows (gather or submit)")
    total = 0.0
    try:
        for _ in range(repeat):
            total += timed(run)
    finally:
        for obj, name in undo:
            delattr(obj, name)
    out = {k: v / repeat * 1e3 for k, v in spent.items()}
    out["whole step, synchronized"] = total / repeat * 1e3
    return out


def main() -> None:  # noqa: C901 - one script, one pass per measurement, in the order the report prints
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=Path, required=True)
    parser.add_argument("--floor-tool", type=Path, required=True, help="disk_floor built from benchmarks/disk_floor.c")
    parser.add_argument("--repeat", type=int, default=9, help="warm runs per variant")
    parser.add_argument("--cold-repeat", type=int, default=5, help="cold runs per variant (prefill: half)")
    parser.add_argument("--queue-depths", default="1,32,128")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--steps", help="only the steps whose names start with one of these (comma-separated)")
    parser.add_argument(
        "--baseline", type=Path, help="an earlier patched engram.py, timed warm beside --sources' (disk/8t before)"
    )
    args = parser.parse_args()
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "shape": vars(SHAPE),
    }
    depths = [int(d) for d in args.queue_depths.split(",")]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        results["table_dir_mount"] = mount_of(Path(tmp).resolve())
        w = build(args.sources, Path(tmp), args.baseline)
        stager, tables, patched = w["stager"], w["tables"], w["patched"]
        if w["before"] is not None:
            UNMAP_FIRST.extend(slot.table for slot in w["before"].slots)
        results["table_bytes"] = sum(os.path.getsize(t.paths[0]) for t in tables)
        pools = {8: stager.pool, 16: ThreadPoolExecutor(16), 4: ThreadPoolExecutor(4)}

        def stage(batch: Any, pool: int = 8, ready: Any = None) -> Callable[[], None]:
            def run() -> None:
                stager.pool = pools[pool]
                stager.stage(batch.input_ids, batch.positions, batch.query_start_loc, batch.lookback, ready=ready)

            return run

        def stage_before(batch: Any) -> Callable[[], None]:
            def run() -> None:
                w["before"].stage(batch.input_ids, batch.positions, batch.query_start_loc, batch.lookback)

            return run

        def release_lookup(batch: Any) -> Callable[[], None]:
            def run() -> None:
                hashes = hash_batch(w["hash_release"], w["release"], batch)
                for i, layer in enumerate(w["host"]):
                    layer.prepare_embeddings(hashes[:, i])
                    layer._ready_rows(batch.num_tokens)

            return run

        def patched_as(fn: Callable[[], None], **values: Any) -> Callable[[], None]:
            def run() -> None:
                saved = {k: getattr(patched, k) for k in values}
                for k, v in values.items():
                    setattr(patched, k, v)
                try:
                    fn()
                finally:
                    for k, v in saved.items():
                        setattr(patched, k, v)

            return run

        def no_prefetch(fn: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                saved = [t.prefetch for t in tables]
                for t in tables:
                    t.prefetch = lambda *_, **__: []  # the step without its prefetch
                try:
                    fn()
                finally:
                    for t, p in zip(tables, saved, strict=True):
                        t.prefetch = p

            return run

        steps: dict[str, Any] = {
            "decode-8x1": make_batch([1] * 8, seed=8),
            "decode-64x1": make_batch([1] * 64, seed=64),
            "verify-8x6 (DSpark k=5)": spec_verify_steps(num_reqs=8, k=5, steps=1, seed=3)[0],
            "prefill-8192": make_batch([8192], seed=1),
        }
        rows: dict[str, Any] = {}
        for name, batch in steps.items():
            if args.steps and not any(name.startswith(p) for p in args.steps.split(",")):
                continue
            prefill = batch.num_tokens > 1024
            row: dict[str, Any] = {"tokens": batch.num_tokens}
            info = step_pages(w, batch)
            row.update({k: v for k, v in info.items() if k not in ("list", "hinted_list", "pages_per_table")})
            list_path = Path(tmp) / "pages.bin"
            info["list"].tofile(list_path)

            warm = {"disk/8t": stage(batch, 8), "release-host": release_lookup(batch)}
            if w["before"] is not None:
                warm["disk/8t before"] = stage_before(batch)
            if prefill:
                warm["disk/16t"] = stage(batch, 16)
                warm["disk/4t"] = stage(batch, 4)
            else:
                for split in WARM_SPLITS:
                    warm[f"disk/8t split {split}"] = patched_as(stage(batch, 8), ENGRAM_ROWS_PER_TASK=split)
            for fn in warm.values():
                fn()
            samples: dict[str, list[float]] = {k: [] for k in warm}
            for _ in range(args.repeat):
                for k, fn in warm.items():
                    samples[k].append(timed(fn))
            row["warm"] = {k: summary(v) for k, v in samples.items()}
            row["warm_breakdown_ms"] = breakdown(stager, warm["disk/8t"], args.repeat)

            cold_variants: dict[str, Callable[[], None]] = {"disk/8t": stage(batch, 8)}
            if prefill:
                # Issue 46 item 1: the page runs hinted from the pool's
                # threads (the default), from the calling thread, or read
                # with preadv by the pool.
                cold_variants["disk/16t"] = stage(batch, 16)
                cold_variants["disk/8t serial hints"] = patched_as(stage(batch, 8), ENGRAM_PREFETCH_MODE="hint")
                cold_variants["disk/8t preadv"] = patched_as(stage(batch, 8), ENGRAM_PREFETCH_MODE="read")
                cold_variants["disk/16t preadv"] = patched_as(stage(batch, 16), ENGRAM_PREFETCH_MODE="read")
                # Fewer, larger requests: pages up to G apart merged (the
                # pages between read too), requests up to H pages (the
                # kernel caps a hint at the device's read-ahead, 8 MiB on
                # the lent machines' virtio disk, 128 KiB by default).
                for gap, pages, mode, threads in SWEEP:
                    key = f"disk/{threads}t gap{gap} req{pages * 4}K {mode}"
                    cold_variants[key] = patched_as(
                        stage(batch, threads),
                        ENGRAM_MERGE_GAP_PAGES=gap,
                        ENGRAM_HINT_PAGES=pages,
                        ENGRAM_PREFETCH_MODE=mode,
                    )
            hints: dict[str, list[int]] = {k: [] for k in cold_variants}
            hinted: dict[str, list[int]] = {k: [] for k in cold_variants}
            cold_samples: dict[str, list[float]] = {k: [] for k in cold_variants}
            repeat = max(2, args.cold_repeat // 2) if prefill else args.cold_repeat
            for _ in range(repeat):  # interleaved rounds
                for k, fn in cold_variants.items():
                    cold(tables)
                    cold_samples[k].append(timed(fn))
                    hints[k].append(sum(t.hint_calls for t in tables))
                    hinted[k].append(sum(t.hinted_pages for t in tables))
            key = "disk/8t no prefetch"
            cold_samples[key] = []
            for _ in range(1 if prefill else 3):
                cold(tables)
                cold_samples[key].append(timed(no_prefetch(stage(batch, 8))))
            row["cold"] = {k: summary(v) for k, v in cold_samples.items()}
            row["cold_hint_calls"] = {k: v[-1] for k, v in hints.items() if v}
            row["cold_hinted_pages"] = {k: v[-1] for k, v in hinted.items() if v}

            # Issue 46 item 6: a third of the step's pages cached (every
            # third, read with read-ahead off), mincore-checked, the rest
            # evicted; interleaved with the same step cold.
            partly: dict[str, list[float]] = {
                "partly warm disk/8t": [],
                "cold disk/8t": [],
                "block warm disk/8t": [],
                "partly warm, whole runs hinted": [],
            }
            found: dict[str, Any] = {}
            block: dict[str, Any] = {}
            for _ in range(max(2, args.cold_repeat // 2) if prefill else args.cold_repeat):
                # The same third cached as one block (the step's first pages
                # in file order): the missing pages' runs stay whole.
                cold(tables)
                for table, pages in zip(tables, info["pages_per_table"], strict=True):
                    read_pages(table.paths[0], pages[: pages.size // 3])
                block["resident_fraction_before"] = [
                    float(resident_pages(t.mapping, p).mean())
                    for t, p in zip(tables, info["pages_per_table"], strict=True)
                ]
                partly["block warm disk/8t"].append(timed(stage(batch, 8)))
                block["missing_pages_found"] = [t.missing_pages for t in tables]
                block["hint_calls"] = [t.hint_calls for t in tables]
                # Every third page cached, the step's runs hinted whole (no
                # mincore filter: the kernel skips what is cached).
                cold(tables)
                for table, pages in zip(tables, info["pages_per_table"], strict=True):
                    read_pages(table.paths[0], pages[::3])
                for t in tables:
                    t._cached = lambda pages: np.zeros(pages.size, dtype=np.bool_)
                try:
                    partly["partly warm, whole runs hinted"].append(timed(stage(batch, 8)))
                finally:
                    for t in tables:
                        del t._cached
                cold(tables)
                resident = []
                for table, pages in zip(tables, info["pages_per_table"], strict=True):
                    read_pages(table.paths[0], pages[::3])
                    resident.append(float(resident_pages(table.mapping, pages).mean()))
                partly["partly warm disk/8t"].append(timed(stage(batch, 8)))
                found = {
                    "resident_fraction_before": resident,
                    "missing_pages_found": [t.missing_pages for t in tables],
                    "step_pages": [int(p.size) for p in info["pages_per_table"]],
                    "hint_calls": [t.hint_calls for t in tables],
                    "resident_after": [
                        float(resident_pages(t.mapping, p).mean())
                        for t, p in zip(tables, info["pages_per_table"], strict=True)
                    ],
                }
                cold(tables)
                partly["cold disk/8t"].append(timed(stage(batch, 8)))
            row["partly_warm"] = {k: summary(v) for k, v in partly.items()} | found | {"block": block}

            row["floor"] = {}
            for depth in depths:
                row["floor"][f"rand 4KiB QD{depth}"] = floor(
                    args.floor_tool, ["rand", str(depth), str(list_path)], tables
                )
            for depth in depths:
                row["floor"][f"runs QD{depth}"] = floor(args.floor_tool, ["runs", str(depth), str(list_path)], tables)
            # The stager's own requests (pages up to ENGRAM_MERGE_GAP_PAGES
            # apart joined, the pages between read too) read by disk_floor.
            info["hinted_list"].tofile(list_path)
            row["floor"]["stager runs QD32"] = floor(args.floor_tool, ["runs", "32", str(list_path)], tables)
            rows[name] = row
            warm_s = "  ".join(f"{k}={v['median_ms']:.3f}" for k, v in row["warm"].items())
            cold_s = "  ".join(f"{k}={v['median_ms']:.2f}" for k, v in row["cold"].items())
            floor_s = "  ".join(f"{k}={v['ms']:.2f}" for k, v in row["floor"].items())
            print(f"{name}: {row['rows']} rows ({row['distinct_rows']} distinct), {row['pages']} pages", flush=True)
            print(f"  warm ms: {warm_s}", flush=True)
            print(f"  cold ms: {cold_s}  hints={row['cold_hint_calls']}", flush=True)
            pw = row["partly_warm"]
            print(
                f"  partly warm ms: {pw['partly warm disk/8t']['median_ms']:.2f} "
                f"[{pw['partly warm disk/8t']['min_ms']:.2f}-{pw['partly warm disk/8t']['max_ms']:.2f}] "
                f"(cold {pw['cold disk/8t']['median_ms']:.2f}), resident before "
                f"{[round(r, 3) for r in pw['resident_fraction_before']]}, missing found {pw['missing_pages_found']} "
                f"of {pw['step_pages']} pages, hints {pw['hint_calls']}, resident after {pw['resident_after']}; "
                f"a third cached as one block: {pw['block warm disk/8t']['median_ms']:.2f} "
                f"[{pw['block warm disk/8t']['min_ms']:.2f}-{pw['block warm disk/8t']['max_ms']:.2f}] {block}; "
                f"every third cached, whole runs hinted: {pw['partly warm, whole runs hinted']['median_ms']:.2f}",
                flush=True,
            )
            print(f"  floor ms: {floor_s}", flush=True)
            if prefill:
                for k, v in row["cold"].items():
                    if k in row["cold_hinted_pages"]:
                        print(
                            f"  cold {k}: {v['median_ms']:.1f} [{v['min_ms']:.1f}-{v['max_ms']:.1f}] ms, "
                            f"{row['cold_hint_calls'][k]} requests, {row['cold_hinted_pages'][k] * PAGE / 1e6:.0f} MB "
                            f"asked for ({row['pages'] * PAGE / 1e6:.0f} MB needed)",
                            flush=True,
                        )
            print("  warm breakdown ms: " + "  ".join(f"{k}={v:.3f}" for k, v in row["warm_breakdown_ms"].items()))
        results["steps"] = rows
        results["sequential"] = {
            f"{chunk} KiB": floor(args.floor_tool, ["seq", str(chunk)], tables) for chunk in (1024, 128)
        }
        for k, v in results["sequential"].items():
            print(
                f"sequential, both weight files, {k} reads: {v['ms']:.0f} ms, "
                f"{v['bytes'] / v['seconds'] / 1e9:.2f} GB/s"
            )

        results["floor_ratios"] = engram_floor.ratios(results)
        print(engram_floor.render(results["floor_ratios"]), flush=True)

        # Host time held by stage() (what prepare_inputs calls) while unrelated
        # GPU work is queued, against the release's lookup, which only enqueues.
        # stage(ready=) waits only for an event recorded before that work.
        hold: dict[str, list[float]] = {"disk stage()": [], "disk stage(ready=)": [], "release-host": []}
        batch = steps["decode-8x1"]
        cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 0.020)  # about 20 ms
        inputs_ready = torch.cuda.Event()
        for _ in range(args.repeat):
            for name, fn in (
                ("disk stage()", stage(batch)),
                ("disk stage(ready=)", stage(batch, ready=inputs_ready)),
                ("release-host", release_lookup(batch)),
            ):
                torch.cuda.synchronize()
                inputs_ready.record()
                torch.cuda._sleep(cycles)
                start = time.perf_counter()
                if name == "release-host":
                    hashes = hash_batch(w["hash_release"], w["release"], batch)
                    for i, layer in enumerate(w["host"]):
                        layer.prepare_embeddings(hashes[:, i])
                else:
                    fn()
                hold[name].append(time.perf_counter() - start)
                torch.cuda.synchronize()
        results["host_hold_with_20ms_queued"] = {k: summary(v) for k, v in hold.items()}
        print(
            "host hold, 20 ms queued: "
            + "  ".join(f"{k}={v['median_ms']:.3f}ms" for k, v in results["host_hold_with_20ms_queued"].items())
        )

        # Issue 46 item 2: the warm steps again, a second interleaved pass
        # after everything above, to see whether the ratios hold in one lease.
        for name, batch in steps.items():
            if name not in rows:
                continue
            warm = {"disk/8t": stage(batch, 8), "release-host": release_lookup(batch)}
            if w["before"] is not None:
                warm["disk/8t before"] = stage_before(batch)
            samples = {k: [] for k in warm}
            for _ in range(args.repeat):
                for k, fn in warm.items():
                    samples[k].append(timed(fn))
            rows[name]["warm_pass2"] = {k: summary(v) for k, v in samples.items()}
        for name, row in rows.items():
            for key in ("warm", "warm_pass2"):
                d, r = row[key]["disk/8t"], row[key]["release-host"]
                b = row[key].get("disk/8t before")
                old = (
                    f"; before {b['median_ms']:.3f} [{b['min_ms']:.3f}-{b['max_ms']:.3f}] ms, "
                    f"ratio {b['median_ms'] / r['median_ms']:.2f}x"
                    if b
                    else ""
                )
                print(
                    f"{name} {key}: disk {d['median_ms']:.3f} [{d['min_ms']:.3f}-{d['max_ms']:.3f}] ms, release "
                    f"{r['median_ms']:.3f} [{r['min_ms']:.3f}-{r['max_ms']:.3f}] ms, "
                    f"ratio {d['median_ms'] / r['median_ms']:.2f}x{old}",
                    flush=True,
                )

        # Issue 46 item 3: a decode step loop, as the V2 runner with async
        # scheduling runs it: prepare (disk: stage(), which waits for the
        # hash ids, i.e. for the step before; release: hash and lookup, only
        # enqueued), forward (queued decoder work standing for the model,
        # then every Engram layer), sample (argmax, copied to the host); the
        # host keeps one step in flight, waiting for the step before's sample
        # before it prepares the next one's inputs.
        results["step_loop"] = step_loop(w, steps, stage, args.repeat)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def loop_steps(
    w: dict[str, Any], stage: Any, batch: Any, which: str, forward_ms: float, after_ms: float, count: int
) -> float:
    """Mean wall time per step of `count` decode steps (see main). `which`:
    "release", "disk" (stage() waits for all queued work) or "disk, ready"
    (stage(ready=) waits for the event after the step before's sample);
    `after_ms` of GPU work follows each sample (a drafter, logprobs, output
    copies)."""
    stager, n = w["stager"], batch.num_tokens
    hidden = torch.randn((n, SHAPE.hc_mult, SHAPE.hidden), device="cuda").to(torch.bfloat16)
    sample_host = torch.empty(n, dtype=torch.int64, pin_memory=True)
    clock = torch.cuda.get_device_properties(0).clock_rate * 1e3
    cycles = int(clock * forward_ms / 1e3)
    after = int(clock * after_ms / 1e3)
    prev: torch.cuda.Event | None = None
    sampled: torch.cuda.Event | None = None
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        if which.startswith("disk"):
            stage(batch, 8, ready=sampled if which == "disk, ready" else None)()
            hashes = hash_batch(stager.hash_state, w["patched"], batch)
            layers = w["disk"]
        else:
            hashes = hash_batch(w["hash_release"], w["release"], batch)
            layers = w["host"]
        for i, layer in enumerate(layers):
            layer.prepare_embeddings(hashes[:, i])
        torch.cuda._sleep(cycles)  # the rest of the model's forward
        acc = None
        for i, layer in enumerate(layers):
            y = layer(hidden, hashes[:, i])
            acc = y if acc is None else acc + y
        assert acc is not None
        sample_host.copy_(acc.float().flatten(1).argmax(dim=1), non_blocking=True)
        sampled = torch.cuda.Event()
        sampled.record()  # the next step's input ids are written from here
        if after:
            torch.cuda._sleep(after)
        done = torch.cuda.Event()
        done.record()
        if prev is not None:
            prev.synchronize()  # the step before's sampled ids
        prev = done
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / count


def step_loop(w: dict[str, Any], steps: dict[str, Any], stage: Any, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("decode-8x1", "decode-64x1"):
        batch = steps[name]
        for which in ("disk", "disk, ready", "release"):
            loop_steps(w, stage, batch, which, 1.0, 1.0, 3)  # warm-up, compiles
        for forward_ms, after_ms in ((5.0, 0.0), (5.0, 2.0), (20.0, 2.0)):
            per: dict[str, list[float]] = {"disk": [], "disk, ready": [], "release": []}
            for _ in range(rounds):  # interleaved
                for which in per:
                    per[which].append(loop_steps(w, stage, batch, which, forward_ms, after_ms, 10))
            got = {k: summary(v) for k, v in per.items()}
            lost = {k: got[k]["median_ms"] - got["release"]["median_ms"] for k in ("disk", "disk, ready")}
            out[f"{name}, {forward_ms:.0f} ms forward, {after_ms:.0f} ms after the sample"] = got | {
                "overlap_lost_ms": lost
            }
            parts = "  ".join(f"{k} {v['median_ms']:.3f} [{v['min_ms']:.3f}-{v['max_ms']:.3f}]" for k, v in got.items())
            losses = "  ".join(f"{k} {v:.3f} ms ({v / got['release']['median_ms']:.1%})" for k, v in lost.items())
            print(
                f"step loop {name}, {forward_ms:.0f} ms forward + {after_ms:.0f} ms after the sample, "
                f"{rounds} rounds: per step ms {parts}; lost a step: {losses}",
                flush=True,
            )
    return out


if __name__ == "__main__":
    main()
