"""Engram staging per step, side by side in one run, on a CUDA GPU:

- ``patched``: the stack's EngramDiskStager (mmap + vectorised gather);
- ``before``: the stager of an earlier stack (``--sources`` DIR/before, e.g.
  per-run ``preadv`` calls), if present;
- ``release-host``: the release's pinned-host-memory lookup of the same rows
  (the path Engram-on-disk replaces; tables held in host memory).

Each step is timed from the call to the end of its GPU work (host wall time,
``torch.cuda.synchronize`` included), median and spread of ``--repeat`` runs,
interleaved. Table files are in the page cache (``warm``) or dropped from it
with ``posix_fadvise(DONTNEED)`` before every run (``cold``). Also measured:
the time ``stage`` holds the host while 20 ms of unrelated GPU work is
queued, against the release, whose lookup the host only enqueues.

    python3 tests/gpu/collect_sources.py /tmp/engram-src --before-rev REV
    python3 benchmarks/bench_engram_staging.py --sources /tmp/engram-src --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.gpu.engram_harness import (
    Shape,
    env,
    hash_batch,
    layout_config,
    load_engram,
    make_batch,
    make_engram,
    make_hash_state,
    write_checkpoint,
)

SHAPE = Shape()
STEPS = {"decode-8x1": [1] * 8, "decode-64x1": [1] * 64, "prefill-8192": [8192]}


def drop_page_cache(directory: Path) -> None:
    for path in directory.glob("*.bin"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(fn: Callable[[], None]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1e3 for s in samples)
    return {"median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1]}


def build(sources: Path, root: Path) -> dict[str, Any]:
    release = load_engram(sources / "release" / "engram.py", "engram_release")
    config = layout_config(SHAPE, release)
    layout = release.EngramLayout(config)
    (root / "ckpt").mkdir()
    tables = write_checkpoint(root / "ckpt" / "model.safetensors", config, SHAPE)
    table_dir = root / "tables"
    patched = load_engram(sources / "patched" / "engram.py", "engram_patched")
    patched.export_engram_tables(str(root / "ckpt"), str(table_dir))
    hbm = [make_engram(release, layout, config, i, "hbm", None, tables) for i in range(len(SHAPE.layer_ids))]
    host = [make_engram(release, layout, config, i, "host", None, tables, reference=hbm[i]) for i in range(len(hbm))]
    stagers = {}
    modules = {"patched": patched}
    if (sources / "before" / "engram.py").exists():
        modules["before"] = load_engram(sources / "before" / "engram.py", "engram_before")
    for name, mod in modules.items():
        disk = [
            make_engram(mod, layout, config, i, "disk", table_dir, tables, reference=hbm[i]) for i in range(len(hbm))
        ]
        with env(DSV41_ENGRAM_DISK="1", DSV41_ENGRAM_DIR=str(table_dir)):
            stagers[name] = mod.EngramDiskStager.create(nn.ModuleList([make_hash_state(mod, layout, SHAPE), *disk]))
    return {
        "release": release,
        "hash_release": make_hash_state(release, layout, SHAPE),
        "host": host,
        "stagers": stagers,
        "table_dir": table_dir,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", default="1,2,4,8,16", help="pool sizes tried for the patched stager")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "cpus": os.cpu_count(), "shape": vars(SHAPE)}
    with tempfile.TemporaryDirectory() as tmp:
        w = build(args.sources, Path(tmp))
        stagers = w["stagers"]
        threads = [int(t) for t in args.threads.split(",")]
        pools = {t: ThreadPoolExecutor(t) for t in threads}

        def stage_with(name: str, batch: Any, pool: ThreadPoolExecutor | None = None) -> Callable[[], None]:
            stager = stagers[name]

            def run() -> None:
                if pool is not None:
                    stager.pool = pool
                stager.stage(batch.input_ids, batch.positions, batch.query_start_loc, batch.lookback)

            return run

        def release_lookup(batch: Any) -> Callable[[], None]:
            def run() -> None:
                hashes = hash_batch(w["hash_release"], w["release"], batch)
                for i, layer in enumerate(w["host"]):
                    layer.prepare_embeddings(hashes[:, i])
                    layer._ready_rows(batch.num_tokens)

            return run

        rows: dict[str, Any] = {}
        for cache in ("warm", "cold"):
            for step, lens in STEPS.items():
                batch = make_batch(lens, seed=len(lens))
                variants: dict[str, Callable[[], None]] = {}
                for t in threads:
                    variants[f"patched/{t}t"] = stage_with("patched", batch, pools[t])
                if "before" in stagers:
                    variants["before"] = stage_with("before", batch)
                variants["release-host"] = release_lookup(batch)
                for fn in variants.values():  # compile and fault in once
                    fn()
                samples: dict[str, list[float]] = {name: [] for name in variants}
                for _ in range(args.repeat):
                    for name, fn in variants.items():  # interleaved
                        if cache == "cold":
                            drop_page_cache(w["table_dir"])
                        samples[name].append(timed(fn))
                rows[f"{cache}/{step}"] = {name: summary(s) for name, s in samples.items()}
                print(
                    f"{cache:4} {step:13} "
                    + "  ".join(f"{n}={v['median_ms']:.3f}ms" for n, v in rows[f"{cache}/{step}"].items()),
                    flush=True,
                )
        results["staging"] = rows

        # Host time held by the call while unrelated GPU work is queued.
        hold: dict[str, list[float]] = {"patched": [], "release-host": []}
        if "before" in stagers:
            hold["before"] = []
        batch = make_batch([1] * 8, seed=5)
        cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 0.020)  # about 20 ms
        for _ in range(args.repeat):
            for name in hold:
                torch.cuda.synchronize()
                torch.cuda._sleep(cycles)
                start = time.perf_counter()
                if name == "release-host":
                    hashes = hash_batch(w["hash_release"], w["release"], batch)
                    for i, layer in enumerate(w["host"]):
                        layer.prepare_embeddings(hashes[:, i])
                elif name == "patched":
                    stage_with("patched", batch, pools[threads[-1]])()
                else:
                    stage_with(name, batch)()
                hold[name].append(time.perf_counter() - start)
                torch.cuda.synchronize()
        results["host_hold_with_20ms_queued"] = {name: summary(s) for name, s in hold.items()}
        print(
            "host hold, 20 ms queued: "
            + "  ".join(f"{n}={v['median_ms']:.3f}ms" for n, v in results["host_hold_with_20ms_queued"].items())
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
