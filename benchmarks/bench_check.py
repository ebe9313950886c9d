"""Benchmark `imgbuild patches check --onto REF` against `git checkout REF && git apply --check`.

A script, not a test: it prints numbers. It uses the project's shipped series
and real vLLM releases from the cache (warm: each release is resolved, and
materialized from its wheel if needed, before anything is timed).

    python benchmarks/bench_check.py                 # the pinned release
    python benchmarks/bench_check.py 0.33.0 0.32.0   # several releases
    python benchmarks/bench_check.py --repeat 20

For each release it prints:
- check (in-process): `checkmatrix.check_onto` for one ref, every stack
  (the full series and each variant), project already loaded;
- check (load+check): Project.load + check_onto, as a fresh command does
  once its imports are done;
- check (CLI): the whole `imgbuild patches check --onto REF --json` command,
  interpreter start-up included;
- git checkout: `git checkout -f REF` into an empty work tree of a shared
  clone of the cache mirror (what a plain-git check must do first);
- git apply --check: one call per distinct stack (the full series, then each
  variant whose patches differ), all of the stack's patches in one call;
- git total: checkout + apply.
The target is under 0.5 s per release for `patches check`; the verdict is
printed for load+check and for the whole command (start-up and imports
included), which can miss where the first meets.

With --pairs (issue 13) it runs side-by-side comparisons instead, each pair
interleaved (A B, then B A, ...) for --rounds rounds, whole commands with
interpreter start-up and a warm bytecode cache (PYTHONPYCACHEPREFIX), and
prints median, min-max and the ratio of medians against its target:

    python benchmarks/bench_check.py --pairs startup scaling cold coldtext --rounds 9

- startup: `imgbuild --help` vs `imgbuild --version` (target 2.0x);
- scaling: `imgbuild patches check --json` over a copy of the project whose
  series has --patches (200) small patches (benchmarks/many_patches.py), its
  mirror warm, vs one `git apply --check` call per distinct stack (the series,
  engram-mem's) over the same files in a work tree of the release checked
  out once, untimed (target 1.0x);
- cold: the first `patches check` on an empty cache, wheel present (imgbuild
  commits the wheel's vllm/ text files into a new mirror, then checks) vs
  unzip of only the files the patches touch + one `git apply --check` per
  stack: the work a user would do for the same answer (target 1.0x);
- coldtext: the same imgbuild side vs unzip of the text members imgbuild
  reads (the same bytes inflated) + the same `git apply --check` calls;
- smoke: both variants built `--force` on the arm64 skeleton with smoke
  against `--no-smoke` (target 2.0x; needs docker and qemu).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_pairs import apply_stacks, stacks

from imgbuild.project import Project, find_root
from imgbuild.upstream.refs import resolve_ref
from imgbuild.workflows.matrix import check_onto

TARGET = 0.5
PAIRS = ("startup", "scaling", "cold", "coldtext", "smoke")


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, best) wall-clock seconds over `repeat` runs."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), min(runs)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("refs", nargs="*", help="releases to check (default: the pinned one)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--project", type=Path, default=None)
    parser.add_argument("--pairs", nargs="+", choices=sorted(PAIRS), help="run these interleaved pairs instead")
    parser.add_argument("--rounds", type=int, default=9, help="rounds per pair (with --pairs)")
    parser.add_argument("--patches", type=int, default=200, help="series length for the scaling pair")
    args = parser.parse_args()
    if args.pairs:
        from bench_pairs import run_pairs

        root = (args.project or find_root(Path(__file__).parent)).resolve()
        return run_pairs(root, args.pairs, args.rounds, args.patches)

    root = (args.project or find_root(Path(__file__).parent)).resolve()
    project = Project.load(root)
    refs = args.refs or [project.pin.tag]
    print(f"project: {root}")
    print(f"series: {len(project.patches)} patches; variants: {', '.join(project.variants)}")
    if not project.patches:
        print("the shipped series is empty: nothing to benchmark")
        return 1

    rows = []
    for ref in refs:
        resolved = resolve_ref(project.pin, ref)  # warm: fetched / materialized before timing
        check_onto(project, [ref])
        in_proc = timed(lambda ref=ref: check_onto(project, [ref]), args.repeat)  # type: ignore[misc]
        load_check = timed(lambda ref=ref: check_onto(Project.load(root), [ref]), args.repeat)  # type: ignore[misc]
        cli = timed(
            lambda ref=ref: subprocess.run(  # type: ignore[misc]
                [sys.executable, "-m", "imgbuild", "-C", str(root), "patches", "check", "--onto", ref, "--json"],
                capture_output=True,
                check=False,
            ),
            max(3, args.repeat // 3),
        )
        matrix = check_onto(project, [ref])

        work = Path(tempfile.mkdtemp(prefix="bench-git-"))
        try:
            git(work, "clone", "-q", "--shared", "--no-checkout", str(resolved.repo.path), "tree")
            tree = work / "tree"
            stack_files = stacks(project)

            def checkout(tree: Path = tree, commit: str = resolved.commit) -> None:
                git(tree, "read-tree", "--empty")
                for child in tree.iterdir():
                    if child.name != ".git":
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
                git(tree, "checkout", "-q", "-f", "--detach", commit)

            apply_check = apply_stacks(stack_files, tree)

            checkout()
            co = timed(checkout, max(3, args.repeat // 3))
            ap = timed(apply_check, args.repeat)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows.append((resolved.tag, in_proc, load_check, cli, co, ap, matrix.ok))

    print()
    header = f"{'release':<10} {'what':<38} {'median s':>9} {'best s':>8}"
    print(header)
    print("-" * len(header))
    for tag, in_proc, load_check, cli, co, ap, ok in rows:
        lines = [
            ("imgbuild check (in-process)", in_proc),
            ("imgbuild check (load+check)", load_check),
            ("imgbuild check (CLI, with start-up)", cli),
            ("git checkout REF", co),
            (f"git apply --check, 1 call/stack x{len(stacks(project))}", ap),
            ("git total (checkout + apply)", (co[0] + ap[0], co[1] + ap[1])),
        ]
        for what, (median, best) in lines:
            print(f"{tag:<10} {what:<38} {median:>9.3f} {best:>8.3f}")
        for what, median in (("load+check", load_check[0]), ("the whole command", cli[0])):
            verdict = "meets" if median < TARGET else "MISSES"
            print(f"{tag:<10} -> {what} {verdict} the {TARGET} s target ({median:.3f} s)")
        print(f"{tag:<10} matrix ok: {ok}")
        print()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
