"""Engram-on-disk cold prefill on a CPU: the step's page requests against the disk's floor.

A cold 8192-token prefill's staging is host work and disk reads; the GPU only
hashes before it and copies after. This times ``EngramDiskStager.stage_hashes``
for that step without a GPU (device buffers are stand-ins, as in
``bench_engram_host.py``, whose tables and loader it uses: 2 layers x 24 heads
x 200K buckets, 1.2 GB a layer, the GPU bench's shape; the step touches about
half of their pages), on this machine's disk, from an emptied page cache
(``mincore`` 0% asserted before every timed step), once for each way of asking
for the pages (ENGRAM_PREFETCH_MODE, ENGRAM_MERGE_GAP_PAGES, pool threads), in
interleaved rounds. Beside them, measured in the same run by
``disk_floor`` (benchmarks/disk_floor.c): both rows files read through with
1 MiB reads (the sequential rate; the bandwidth floor is the step's distinct
pages at that rate, issue 46's yardstick) and the step's exact pages read as
merged runs at QD32, and the same pages with the gaps of up to G pages
between them filled in (what the stager asks for at ENGRAM_MERGE_GAP_PAGES=G;
read as runs of up to 1 MiB): fewer requests for more bytes, whose best is
what any reader of these pages gets from this disk. A partly warm step (every
third of its pages read in first, read-ahead off, mincore-checked) runs in the
same rounds.

    python3 tests/gpu/collect_sources.py /tmp/engram-src
    gcc -O2 -pthread -o /tmp/disk_floor benchmarks/disk_floor.c
    python3 benchmarks/bench_engram_cold.py --sources /tmp/engram-src/patched/engram.py --floor-tool /tmp/disk_floor
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from bench_engram_host import hash_ids, load, make_stager, write_tables  # puts the repository on sys.path
from tests.support.page_cache import PAGE, evict, read_pages, resident_pages

TOKENS = 8192
FLOOR_GAPS = (0, 1, 2, 4, 8)
# name: (the module's settings, pool threads); {} is the file as committed
# (pool hints, pages up to 4 apart merged, requests up to 128 KiB).
VARIANTS: dict[str, tuple[dict[str, Any], int]] = {
    "committed/8t": ({}, 8),
    "caller hints/8t": ({"ENGRAM_PREFETCH_MODE": "hint"}, 8),
    "pool preadv/8t": ({"ENGRAM_PREFETCH_MODE": "read"}, 8),
    "gap0/8t": ({"ENGRAM_MERGE_GAP_PAGES": 0}, 8),
    "gap1/8t": ({"ENGRAM_MERGE_GAP_PAGES": 1}, 8),
    "gap2/8t": ({"ENGRAM_MERGE_GAP_PAGES": 2}, 8),
    "committed/16t": ({}, 16),
    "gap1/16t": ({"ENGRAM_MERGE_GAP_PAGES": 1}, 16),
    "gap2/16t": ({"ENGRAM_MERGE_GAP_PAGES": 2}, 16),
}


def cold(tables: list[Any]) -> None:
    left = evict(tables)
    if left != 0.0:
        raise SystemExit(f"the page cache kept {left:.1%} of a table after eviction: no cold measurement")


def floor(tool: Path, args: list[str], tables: list[Any]) -> dict[str, Any]:
    cold(tables)
    out = subprocess.run(
        [str(tool), *args, *(t.paths[0] for t in tables)], check=True, capture_output=True, text=True
    ).stdout
    found: dict[str, Any] = json.loads(out)
    found["ms"] = found["seconds"] * 1e3
    return found


def with_gaps(pages: np.ndarray, gap: int) -> np.ndarray:
    """`pages` (ascending) and every page in a gap of at most `gap` pages between two of them."""
    steps = np.diff(pages)
    fill = np.flatnonzero((steps > 1) & (steps <= gap + 1))
    extra = [np.arange(pages[i] + 1, pages[i + 1]) for i in fill.tolist()]
    return np.unique(np.concatenate([pages, *extra])) if extra else pages


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(samples)
    return {"median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1], "n": len(ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=Path, required=True, help="a patched engram.py")
    parser.add_argument("--floor-tool", type=Path, required=True, help="disk_floor built from benchmarks/disk_floor.c")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--variants", help="only these variants (comma-separated names)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    chosen = {k: v for k, v in VARIANTS.items() if not args.variants or k in args.variants.split(",")}
    pools = {n: ThreadPoolExecutor(n, thread_name_prefix=f"cold-{n}") for n in {8, *(t for _, t in chosen.values())}}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        paths = write_tables(Path(tmp))
        os.sync()
        scope = load(args.sources, pools[8])
        stager = make_stager(scope, paths, pools[8])
        tables = [slot.table for slot in stager.slots]
        hashes = hash_ids(TOKENS, seed=8192)
        pages = [np.unique(slot.table._pages(slot.select(hashes[:, i]))) for i, slot in enumerate(stager.slots)]
        lists: dict[int, Path] = {}
        for gap in FLOOR_GAPS:
            lists[gap] = Path(tmp) / f"pages-gap{gap}.bin"
            np.concatenate(
                [
                    np.stack([np.full(q.size, i, np.int64), q.astype(np.int64) * PAGE], axis=1)
                    for i, q in enumerate(with_gaps(p, gap) for p in pages)
                ]
            ).tofile(lists[gap])
        needed = sum(p.size for p in pages) * PAGE
        table_bytes = sum(t.sizes[0] for t in tables)

        def stage(settings: dict[str, Any], threads: int) -> float:
            saved = {k: scope[k] for k in settings}
            scope.update(settings)
            stager.pool = pools[threads]
            try:
                start = time.perf_counter()
                stager.stage_hashes(hashes)
                return (time.perf_counter() - start) * 1e3
            finally:
                scope.update(saved)

        results: dict[str, Any] = {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "sources": str(args.sources),
            "table_bytes": table_bytes,
            "needed_bytes": needed,
            "pages_touched_fraction": needed / table_bytes,
            "rounds": args.rounds,
        }
        sequential = floor(args.floor_tool, ["seq", "1024"], tables)
        rate = sequential["bytes"] / sequential["seconds"]
        results["sequential"] = sequential
        results["bandwidth_floor_ms"] = needed / rate * 1e3
        results["runs_qd32"] = {
            gap: floor(args.floor_tool, ["runs", "32", str(path)], tables) for gap, path in lists.items()
        }
        samples: dict[str, list[float]] = {k: [] for k in [*chosen, "partly warm (a third cached) committed/8t"]}
        requests: dict[str, list[int]] = {k: [] for k in samples}
        asked: dict[str, list[int]] = {k: [] for k in samples}
        resident: list[float] = []
        for _ in range(args.rounds):
            for name, (settings, threads) in chosen.items():
                cold(tables)
                samples[name].append(stage(settings, threads))
                requests[name].append(sum(t.hint_calls for t in tables))
                asked[name].append(sum(t.hinted_pages for t in tables) * PAGE)
            name = "partly warm (a third cached) committed/8t"
            cold(tables)
            for table, table_pages in zip(tables, pages, strict=True):
                read_pages(table.paths[0], table_pages[::3])
            resident.append(
                float(np.mean([resident_pages(t.mapping, p).mean() for t, p in zip(tables, pages, strict=True)]))
            )
            samples[name].append(stage({}, 8))
            requests[name].append(sum(t.hint_calls for t in tables))
            asked[name].append(sum(t.hinted_pages for t in tables) * PAGE)
        results["partly_warm_resident_before"] = resident
        results["variants"] = {
            k: {**summary(v), "requests": requests[k][-1], "asked_bytes": asked[k][-1]} for k, v in samples.items()
        }
    bw = results["bandwidth_floor_ms"]
    print(
        f"# cold prefill {TOKENS} on a CPU: {os.cpu_count()} cpus, kernel {platform.release()}, "
        f"{args.rounds} interleaved rounds, median [min-max]"
    )
    print(
        f"tables {table_bytes / 1e6:.0f} MB, step's distinct pages {needed / 1e6:.0f} MB "
        f"({needed / table_bytes:.0%} of them); sequential {rate / 1e9:.2f} GB/s "
        f"({sequential['ms']:.0f} ms for both files): bandwidth floor {bw:.0f} ms"
    )
    for gap, run in results["runs_qd32"].items():
        print(
            f"disk_floor, the pages with gaps of up to {gap} filled, as runs at QD32: {run['ms']:.0f} ms "
            f"({run['ms'] / bw:.2f}x), {run['reads']} reads, {run['bytes'] / 1e6:.0f} MB"
        )
    for name, row in results["variants"].items():
        print(
            f"{name}: {row['median_ms']:.0f} ms [{row['min_ms']:.0f}-{row['max_ms']:.0f}], "
            f"{row['median_ms'] / bw:.2f}x the bandwidth floor; {row['requests']} requests, "
            f"{row['asked_bytes'] / 1e6:.0f} MB asked for"
        )
    print(f"partly warm: resident before each run (mincore) {[round(r, 3) for r in resident]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
