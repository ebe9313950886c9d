"""Interleaved side-by-side pairs for bench_check.py --pairs (issue 13's targets).

Each pair is two whole commands, A (imgbuild) and B (the alternative), run in
alternating order round after round, so that load from other processes on the
machine falls on both alike. Reported: median and min-max of each, and the
ratio of the medians against the target. Each side's label says which caches
it has; both sides of a pair get the same ones.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from many_patches import make_project

from imgbuild.config.models import WheelSource
from imgbuild.project import Project
from imgbuild.upstream.mirror import Mirror, _text_member


@dataclass
class Pair:
    name: str
    a_label: str
    a: Callable[[], None]
    b_label: str
    b: Callable[[], None]
    target: float
    a_prep: Callable[[], None] = lambda: None  # untimed, before each run (e.g. remove the last run's output)
    b_prep: Callable[[], None] = lambda: None


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, check: bool = True) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
    if check and proc.returncode != 0:
        shown = " ".join(cmd[:12]) + (f" ... ({len(cmd)} args)" if len(cmd) > 12 else "")
        raise SystemExit(f"{shown} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-400:]}")


def seconds(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleave(pair: Pair, rounds: int) -> tuple[list[float], list[float]]:
    for prep, fn in ((pair.a_prep, pair.a), (pair.b_prep, pair.b)):  # warm: bytecode, page cache
        prep()
        fn()
    a_times: list[float] = []
    b_times: list[float] = []
    for i in range(rounds):
        order = [(pair.a_prep, pair.a, a_times), (pair.b_prep, pair.b, b_times)]
        for prep, fn, out in order if i % 2 == 0 else reversed(order):
            prep()
            out.append(seconds(fn))
    return a_times, b_times


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def run_pairs(root: Path, names: list[str], rounds: int, n_patches: int) -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-pairs-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # a warm bytecode cache, as an installed package has
    imgbuild = [sys.executable, "-m", "imgbuild"]
    try:
        print(f"start: {load()}; {rounds} interleaved rounds per pair")
        pairs = [build_pair(name, root, work, env, imgbuild, n_patches) for name in names]
        rows = []
        for pair in pairs:
            a, b = interleave(pair, rounds)
            rows.append((pair, a, b))
            print(f"  {pair.name}: done ({load()})", flush=True)
        print()
        header = f"{'pair':<8} {'what':<60} {'median s':>9} {'min-max s':>13} {'ratio':>6} {'target':>7}"
        print(header)
        print("-" * len(header))
        failed = 0
        for pair, a, b in rows:
            ratio = statistics.median(a) / statistics.median(b)
            verdict = "ok" if ratio <= pair.target else "MISSES"
            failed += verdict != "ok"
            print(f"{pair.name:<8} {pair.a_label:<60} {statistics.median(a):>9.3f} {spread(a):>13}")
            print(f"{'':<8} {pair.b_label:<60} {statistics.median(b):>9.3f} {spread(b):>13}", end="")
            print(f" {ratio:>6.2f} {pair.target:>6.1f}x {verdict}")
        print(f"\nend: {load()}")
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def spread(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f}"


def build_pair(name: str, root: Path, work: Path, env: dict[str, str], imgbuild: list[str], n: int) -> Pair:
    if name == "startup":
        return Pair(
            name,
            "imgbuild --help",
            lambda: run([*imgbuild, "--help"], env=env),
            "imgbuild --version",
            lambda: run([*imgbuild, "--version"], env=env),
            2.0,
        )
    if name == "scaling":
        return scaling_pair(root, work, env, imgbuild, n)
    if name in ("cold", "coldtext"):
        return cold_pair(root, work, env, imgbuild, same_files=name == "coldtext")
    if name == "smoke":
        return smoke_pair(root, env, imgbuild)
    raise SystemExit(f"unknown pair {name}")


SMOKE_REPO = os.environ.get("IMGBUILD_BENCH_SMOKE_REPOSITORY", "imgbuild-bench-smoke/vllm-dsv41")  # one per session


def smoke_pair(root: Path, env: dict[str, str], imgbuild: list[str]) -> Pair:
    """Both variants, `--force`, on the arm64 skeleton (under qemu here), with and without smoke.

    The target is issue 13's "smoke adds at most 1.0x the no-smoke build time": with / without <= 2.0.
    Images go to SMOKE_REPO; remove them afterwards with `docker images SMOKE_REPO`.
    """
    base = [*imgbuild, "-C", str(root), "build", "latest", "engram-mem", "--force"]
    base += ["--base", "skeleton", "--repository", SMOKE_REPO, "--platform", "linux/arm64"]
    run([*imgbuild, "-C", str(root), "skeleton", "--platform", "linux/arm64"], env=env)  # untimed: the base exists
    return Pair(
        "smoke",
        "build latest engram-mem --force (arm64, smoke included)",
        lambda: run(base, env=env),
        "build latest engram-mem --force --no-smoke",
        lambda: run([*base, "--no-smoke"], env=env),
        2.0,
    )


def stacks(project: Project) -> list[tuple[str, list[str]]]:
    """What `patches check` checks: the full series and each variant's stack, as patch files, each distinct once."""
    by_name = {p.name: str(project.patches_dir / p.filename) for p in project.patches}
    out: list[tuple[str, list[str]]] = [("series", list(by_name.values()))]
    for variant in project.variants.values():
        files = [by_name[n] for n in variant.selected]
        if all(files != seen for _, seen in out):
            out.append((variant.name, files))
    return out


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "[]*?" else c for c in name)


def apply_stacks(stack_files: list[tuple[str, list[str]]], cwd: Path) -> Callable[[], None]:
    """One `git apply --check` call per stack, all its patches in order (git applies them in sequence)."""

    def go() -> None:
        for _, files in stack_files:
            run(["git", "apply", "--check", *files], cwd=cwd)

    return go


def stacks_label(stack_files: list[tuple[str, list[str]]]) -> str:
    return " + ".join(f"{name} ({len(files)})" for name, files in stack_files)


def scaling_pair(root: Path, work: Path, env: dict[str, str], imgbuild: list[str], n: int) -> Pair:
    """Warm on both sides: imgbuild's mirror of the release; git's work tree of it, checked out once, untimed."""
    project = make_project(root, work / "many", n)
    stack_files = stacks(project)
    up = project.upstream
    tree = work / "tree"
    run(["git", "clone", "-q", "--shared", "--no-checkout", str(up.repo.path), str(tree)])
    run(["git", "checkout", "-q", "-f", "--detach", up.commit], cwd=tree)
    print(f"scaling: git's side, one call per stack: {stacks_label(stack_files)}")
    return Pair(
        "scaling",
        f"imgbuild patches check --json ({len(project.patches)} patches), mirror warm",
        lambda: run([*imgbuild, "-C", str(project.root), "patches", "check", "--json"], env=env),
        f"git apply --check, 1 call per stack ({len(stack_files)}), tree checked out",
        apply_stacks(stack_files, tree),
        1.0,
    )


def cold_pair(root: Path, work: Path, env: dict[str, str], imgbuild: list[str], same_files: bool) -> Pair:
    """The first check of a release, wheel downloaded, nothing else cached on either side.

    imgbuild commits every text file of the wheel's package root into a new mirror (so that later
    commands are warm), then checks. `cold`: the alternative a user would write for the same
    question, unzip of only the files the patches touch, then one `git apply --check` per stack.
    `coldtext`: the same, but unzipping the members imgbuild reads (its text files, the same test:
    no NUL byte), so both sides inflate the same bytes.
    """
    project = Project.load(root)
    source = project.pin.source
    if not isinstance(source, WheelSource):
        raise SystemExit("the cold pair needs a wheel pin")
    wheel = Mirror(source, project.pin.package_root).fetch_wheel(source.version)
    stack_files = stacks(project)
    prefix = project.pin.package_root + "/"
    if same_files:
        with zipfile.ZipFile(wheel) as zf:
            names = sorted(n for n in zf.namelist() if n.startswith(prefix) and not n.endswith("/"))
            binaries = [n for n in names if _text_member(zf, n) is None]
        # unzip takes names as patterns ([128,128] in some names), so: all of the root but the binaries
        members = [f"{prefix}*", "-x", *(glob_escape(n) for n in binaries)]
        what = f"unzip of the {len(names) - len(binaries)} text members imgbuild reads"
    else:
        members = [glob_escape(n) for n in sorted({path for p in project.patches for path in p.paths})]
        what = f"unzip of the {len(members)} files the patches touch"
    print(f"{'coldtext' if same_files else 'cold'}: {what}; git apply, one call per stack: {stacks_label(stack_files)}")

    cache = work / "cold-cache"
    dest = work / "unzipped"

    def empty_cache() -> None:
        shutil.rmtree(cache, ignore_errors=True)
        (cache / "wheels").mkdir(parents=True)
        (cache / "wheels" / wheel.name).symlink_to(wheel)

    def imgbuild_cold() -> None:
        run([*imgbuild, "-C", str(root), "patches", "check", "--json"], env={**env, "IMGBUILD_CACHE": str(cache)})

    check = apply_stacks(stack_files, dest)

    def plain_cold() -> None:
        run(["unzip", "-q", str(wheel), *members, "-d", str(dest)])
        check()

    return Pair(
        "coldtext" if same_files else "cold",
        "imgbuild patches check, empty cache: commits the text tree",
        imgbuild_cold,
        f"{what.replace('unzip of the', 'unzip')} + git apply x{len(stack_files)}",
        plain_cold,
        1.0,
        a_prep=empty_cache,
        b_prep=lambda: shutil.rmtree(dest, ignore_errors=True),
    )
