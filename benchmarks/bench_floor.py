"""The floor under issue 13's remaining targets: what any Python CLI built on the design card's
libraries pays before it does any work, next to the alternatives it is compared with.

Each step is a whole process, run round after round in rotating order (so load from other
processes falls on all alike); reported are the median and min-max. The alternatives run here,
in the same rounds, are the ones a floor can be compared with directly: `docker version` (a Go
CLI reaching the daemon, what `docker push` starts with) and one `git apply --check`.

    python3 benchmarks/bench_floor.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
STEPS: dict[str, list[str]] = {
    "python3 -S -c pass (no site)": [PY, "-S", "-c", "pass"],
    "python3 -c pass (site, as every tool starts)": [PY, "-c", "pass"],
    "python3 -c 'import typer' (typer 0.2x imports pydantic)": [PY, "-c", "import typer"],
    "python3 -c 'import typer, yaml, rich.console, git'": [PY, "-c", "import typer, yaml, rich.console, git"],
    "imgbuild --version": [PY, "-m", "imgbuild", "--version"],
    "docker version (Go CLI + one daemon call)": ["docker", "version", "--format", "{{.Server.Version}}"],
}


def git_apply_check(tmp: Path) -> list[str]:
    """One `git apply --check` of a one-line patch, as the 200-patch loop runs 200 times."""
    subprocess.run(["git", "init", "-q", str(tmp)], check=True)
    (tmp / "a.py").write_text("".join(f"line {i}\n" for i in range(40)))
    patch = tmp / "one.patch"
    patch.write_text("--- a/a.py\n+++ b/a.py\n@@ -20,0 +21 @@\n+# one\n")
    return ["git", "-C", str(tmp), "apply", "--check", "--unidiff-zero", str(patch)]


def seconds(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.decode(errors='replace')[-300:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # warm bytecode, as users have
    with tempfile.TemporaryDirectory(prefix="imgbuild-floor-") as tmp:
        steps = {**STEPS, "git apply --check (one patch)": git_apply_check(Path(tmp))}
        times: dict[str, list[float]] = {name: [] for name in steps}
        for cmd in steps.values():  # warm: bytecode, page cache
            seconds(cmd, env)
        names = list(steps)
        print(f"start: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.rounds} rounds")
        for i in range(args.rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                times[name].append(seconds(steps[name], env))
        print(f"end: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        width = max(map(len, names))
        for name in names:
            t = times[name]
            print(f"{name:<{width}}  {statistics.median(t):6.3f} s  ({min(t):.3f}-{max(t):.3f})")


if __name__ == "__main__":
    main()
