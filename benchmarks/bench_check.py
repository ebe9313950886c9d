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
- git apply --check: one `git apply --check` per patch, each against the
  checked-out release (plain git has no notion of the stack or variants);
- git total: checkout + apply of the full series.
The target is under 0.5 s per release for `patches check`.

With --cold it also times the first run on an empty cache (the pinned wheel
file already downloaded): `imgbuild patches check` has to commit the wheel's
`vllm/` tree into a new mirror first. The plain alternative is unzipping the
wheel's `vllm/` tree and running `git apply --check` per patch.

With --pairs (issue 13) it runs side-by-side comparisons instead, each pair
interleaved (A B, then B A, ...) for --rounds rounds, whole commands with
interpreter start-up and a warm bytecode cache (PYTHONPYCACHEPREFIX), and
prints median, min-max and the ratio of medians against its target:

    python benchmarks/bench_check.py --pairs startup scaling cold --rounds 9

- startup: `imgbuild --help` vs `imgbuild --version` (target 2.0x);
- scaling: `imgbuild patches check --json` over a copy of the project whose
  series has --patches (200) small patches (benchmarks/many_patches.py) vs a
  `git apply --check` loop over the same files in a checked-out release
  (target 1.0x);
- cold: the first `patches check` on an empty cache, wheel present, vs unzip
  of the wheel's vllm/ + `git apply --check` of the series (target 1.0x).
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

from imgbuild.project import Project, find_root
from imgbuild.upstream.refs import resolve_ref
from imgbuild.workflows.matrix import check_onto

TARGET = 0.5
PAIRS = ("startup", "scaling", "cold", "smoke")


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
    parser.add_argument("--cold", action="store_true", help="also time the first run on an empty cache")
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

    if args.cold:
        cold(root, project, max(3, args.repeat // 3))

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
            patch_files = [str(project.patches_dir / p.filename) for p in project.patches]

            def checkout(tree: Path = tree, commit: str = resolved.commit) -> None:
                git(tree, "read-tree", "--empty")
                for child in tree.iterdir():
                    if child.name != ".git":
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
                git(tree, "checkout", "-q", "-f", "--detach", commit)

            def apply_check(tree: Path = tree, files: list[str] = patch_files) -> None:
                for f in files:  # each patch on its own, against the checked-out release
                    subprocess.run(["git", "apply", "--check", f], cwd=tree, capture_output=True, check=False)

            checkout()
            co = timed(checkout, max(3, args.repeat // 3))
            ap = timed(apply_check, args.repeat)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows.append((resolved.tag, in_proc, load_check, cli, co, ap, matrix.ok))

    print()
    header = f"{'release':<10} {'what':<34} {'median s':>9} {'best s':>8}"
    print(header)
    print("-" * len(header))
    for tag, in_proc, load_check, cli, co, ap, ok in rows:
        lines = [
            ("imgbuild check (in-process)", in_proc),
            ("imgbuild check (load+check)", load_check),
            ("imgbuild check (CLI, with start-up)", cli),
            ("git checkout REF", co),
            (f"git apply --check x{len(project.patches)}", ap),
            ("git total (checkout + apply)", (co[0] + ap[0], co[1] + ap[1])),
        ]
        for what, (median, best) in lines:
            print(f"{tag:<10} {what:<34} {median:>9.3f} {best:>8.3f}")
        verdict = "meets" if load_check[0] < TARGET else "MISSES"
        print(f"{tag:<10} {'-> ' + verdict + f' the {TARGET} s target; matrix ok: {ok}':<34}")
        print()
    return 0


def cold(root: Path, project: Project, repeat: int) -> None:
    """First `patches check` on an empty cache vs unzip + `git apply --check`."""
    from imgbuild.config.models import WheelSource
    from imgbuild.upstream.mirror import Mirror

    source = project.pin.source
    if not isinstance(source, WheelSource):
        print("--cold needs a wheel pin")
        return
    wheel = Mirror(source, project.pin.package_root).fetch_wheel(source.version)
    patch_files = [str(project.patches_dir / p.filename) for p in project.patches]

    def imgbuild_cold() -> None:
        cache = Path(tempfile.mkdtemp(prefix="bench-cold-"))
        try:
            (cache / "wheels").mkdir()
            (cache / "wheels" / wheel.name).symlink_to(wheel)
            env = {**os.environ, "IMGBUILD_CACHE": str(cache)}
            cmd = [sys.executable, "-m", "imgbuild", "-C", str(root), "patches", "check", "--json"]
            subprocess.run(cmd, capture_output=True, check=True, env=env)
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    def plain_cold() -> None:
        work = Path(tempfile.mkdtemp(prefix="bench-cold-git-"))
        try:
            subprocess.run(["unzip", "-q", str(wheel), "vllm/*", "-d", str(work)], check=True)
            for f in patch_files:
                subprocess.run(["git", "apply", "--check", f], cwd=work, capture_output=True, check=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    ours = timed(imgbuild_cold, repeat)
    plain = timed(plain_cold, repeat)
    print()
    print(f"cold cache (wheel present), median of {repeat}:")
    print(f"  imgbuild patches check (new mirror + check)   {ours[0]:7.2f} s")
    print(f"  unzip vllm/ + git apply --check x{len(patch_files)}          {plain[0]:7.2f} s")
    print(f"  ratio imgbuild / plain                         {ours[0] / plain[0]:7.2f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
