"""Cold Engram staging against the disk's floors, from a results file of
``bench_engram_staging.py`` (issue 36 item 4):

- ``bandwidth``: the bytes the step needs (its distinct 4 KiB pages) at the
  disk's sequential bandwidth, as measured in the same run (1 MiB reads of both
  weight files from an emptied page cache): no reader of those bytes beats it;
- ``runs QDn``: ``disk_floor runs`` reading the same pages with adjacent pages
  merged into one read per run, n at a time (only in results files written
  after this mode was added);
- ``rand 4KiB QDn``: one 4 KiB read per page, the earlier floor, for reference.

    python3 benchmarks/engram_floor.py benchmarks/results/engram-staging-h200-cold-v0.34.0.json

The bench calls ``ratios`` itself; this entry point re-reads a committed file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    seq = results["sequential"]["1024 KiB"]
    bandwidth = seq["bytes"] / seq["seconds"]
    out: dict[str, Any] = {"sequential_GBps": bandwidth / 1e9}
    for name, step in results["steps"].items():
        floors = {"bandwidth": step["pages"] * 4096 / bandwidth * 1e3}
        floors.update({k: v["ms"] for k, v in step["floor"].items()})
        cold = {k: v["median_ms"] for k, v in step["cold"].items() if "no prefetch" not in k and "gap" not in k}
        out[name] = {
            "bytes": step["pages"] * 4096,
            "floors_ms": floors,
            "cold_ms": cold,
            "cold_over_floor": {f"{c} / {f}": cold[c] / floors[f] for c in cold for f in floors},
        }
    return out


def render(found: dict[str, Any]) -> str:
    lines = [f"sequential bandwidth: {found['sequential_GBps']:.2f} GB/s"]
    for name, step in found.items():
        if name == "sequential_GBps":
            continue
        lines.append(f"{name}: {step['bytes'] / 1e6:.1f} MB of distinct pages")
        lines.append("  floors ms: " + "  ".join(f"{k}={v:.2f}" for k, v in step["floors_ms"].items()))
        lines.append("  cold ms:   " + "  ".join(f"{k}={v:.2f}" for k, v in step["cold_ms"].items()))
        lines.append("  cold / floor: " + "  ".join(f"{k}={v:.2f}x" for k, v in step["cold_over_floor"].items()))
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: engram_floor.py RESULTS.json")
    print(render(ratios(json.loads(Path(sys.argv[1]).read_text()))))


if __name__ == "__main__":
    main()
