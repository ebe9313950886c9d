"""Interleaved build pairs (issue 13's targets): imgbuild against what a user would type by hand.

    python3 benchmarks/bench_build_pairs.py [--rounds 5] [--pairs both-nocache mem-warm noop]

On the local daemon, the skeleton stand-in as the base, images under
`imgbuild-bench/vllm-dsv41` (removed at the end). Each pair runs A and B in
alternating order round after round (bench_pairs.interleave), so load from
other processes falls on both alike; reported: median, min-max, ratio. The
pair's name says which caches each side has; both sides get the same ones.

- both-nocache: no cache on either side. `build latest engram-mem --force
  --no-smoke` (BuildKit without its cache) with imgbuild's drift-check records
  removed before each run, against the hand pipeline reusing one work tree of
  the pinned release: `git checkout -f` of the pin, 7x `git apply`, then two
  `buildx build --load --no-cache` of the seed's Dockerfiles (latest: FROM the
  base, COPY the seven files, ENTRYPOINT []; engram-mem: FROM latest, COPY the
  three original Engram files, ENTRYPOINT []). Both sides start from a warm
  copy of the release (imgbuild's mirror, git's work tree).
- mem-warm: BuildKit's cache warm on both sides. `build engram-mem --no-smoke`
  with latest present (engram-mem's immutable tag removed before each run; its
  drift-check records kept: the hand side checks no drift) against `buildx
  build --load` of the seed's engram-mem Dockerfile, cache on.
- noop: `build latest engram-mem` with nothing changed against the same
  command cold: `--force --no-smoke` (BuildKit without its cache) with the
  drift-check records removed (the upstream mirror kept). imgbuild against
  itself: the ratio says what the no-op saves (target 0.05x).

Images go under IMGBUILD_BENCH_REPOSITORY (default imgbuild-bench/vllm-dsv41).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pairs import Pair, interleave, load, run, spread  # noqa: E402

from imgbuild.builder.bases import DRIFT_DIR  # noqa: E402
from imgbuild.cache import cache_dir  # noqa: E402
from imgbuild.engine import Engine  # noqa: E402
from imgbuild.project import Project  # noqa: E402

# IMGBUILD_BENCH_REPOSITORY: another name, so that two runs on one daemon (engineers sharing it) do not collide
REPO = os.environ.get("IMGBUILD_BENCH_REPOSITORY", "imgbuild-bench/vllm-dsv41")
SITE = "/usr/local/lib/python3.12/dist-packages"


def context(lines: list[str], files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [("Dockerfile", ("\n".join(lines) + "\n").encode()), *files.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def buildx(ctx: bytes, tag: str, cache: bool = False) -> None:
    args = ["docker", "buildx", "build", "--platform", "linux/arm64", "--load", *([] if cache else ["--no-cache"])]
    args += ["-t", tag, "-"]
    proc = subprocess.run(args, input=ctx, capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.decode(errors='replace')[-400:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pairs", nargs="+", default=["both-nocache", "mem-warm", "noop"])
    args = ap.parse_args()
    engine = Engine.connect()
    project = Project.load(ROOT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    work = Path(tempfile.mkdtemp(prefix="bench-build-pairs-"))
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    env["PYTHONPATH"] = str(ROOT / "src")
    imgbuild = [sys.executable, "-m", "imgbuild", "-C", str(ROOT)]
    opts = ["--base", "skeleton", "--repository", REPO]
    print(f"start: {load()}; {args.rounds} interleaved rounds per pair")
    print("setup: skeleton, both variants built and smoke-tested (not timed)", flush=True)
    run([*imgbuild, "build", "latest", "engram-mem", *opts], env=env)
    skeleton = (
        engine.require(f"{REPO}:latest").labels["org.opencontainers.image.base.name"].removeprefix("docker.io/library/")
    )

    latest, mem = project.plan(["latest"])[0], project.plan(["engram-mem"])[0]
    up = project.upstream
    tree = work / "tree"
    run(["git", "clone", "-q", "--shared", "--no-checkout", str(up.repo.path), str(tree)])
    patches = [str(project.patches_dir / p.filename) for p in project.patches]
    originals = [f.path for f in mem.files if f.state == "original"]

    def hand_pipeline() -> None:
        run(["git", "checkout", "-q", "-f", "--detach", up.commit], cwd=tree)
        for p in patches:
            run(["git", "apply", p], cwd=tree)
        files = {f.path: (tree / f.path).read_bytes() for f in latest.files}  # paths start with vllm/
        lines = [f"FROM {skeleton}", *(f"COPY {name} {SITE}/{name}" for name in files), "ENTRYPOINT []"]
        buildx(context(lines, files), f"{REPO}:hand-latest")
        run(["git", "checkout", "-q", "-f", up.commit, "--", *originals], cwd=tree)
        files = {p: (tree / p).read_bytes() for p in originals}
        lines = [f"FROM {REPO}:hand-latest", *(f"COPY {name} {SITE}/{name}" for name in files), "ENTRYPOINT []"]
        buildx(context(lines, files), f"{REPO}:hand-engram-mem")

    seed_files = {p: mem.contents[p] for p in originals}
    seed = context(
        [f"FROM {REPO}:latest", *(f"COPY {name} {SITE}/{name}" for name in seed_files), "ENTRYPOINT []"], seed_files
    )

    def drop_mem() -> None:
        for img in engine.client.images.list(name=REPO):
            if img.labels.get("imgbuild.variant") == "engram-mem":
                for tag in img.tags:
                    if tag.startswith(f"{REPO}:0."):
                        engine.untag(tag)

    def no_drift_records() -> None:
        shutil.rmtree(cache_dir() / DRIFT_DIR, ignore_errors=True)

    pairs = {
        "both-nocache": Pair(
            "both-nocache",
            "imgbuild build latest engram-mem --force --no-smoke, no drift records",
            lambda: run([*imgbuild, "build", "latest", "engram-mem", "--force", "--no-smoke", *opts], env=env),
            "hand: checkout -f, 7x git apply, 2x buildx --no-cache",
            hand_pipeline,
            1.0,
            a_prep=no_drift_records,
        ),
        "mem-warm": Pair(
            "mem-warm",
            "imgbuild build engram-mem --no-smoke (latest present, drift records kept)",
            lambda: run([*imgbuild, "build", "engram-mem", "--no-smoke", *opts], env=env),
            "buildx build --load of the seed's engram-mem, cache on",
            lambda: buildx(seed, f"{REPO}:seed-engram-mem", cache=True),
            1.0,
            a_prep=drop_mem,
        ),
        "noop": Pair(
            "noop",
            "imgbuild build latest engram-mem (nothing changed)",
            lambda: run([*imgbuild, "build", "latest", "engram-mem", *opts], env=env),
            "the same, --force --no-smoke, no drift records",
            lambda: run([*imgbuild, "build", "latest", "engram-mem", "--force", "--no-smoke", *opts], env=env),
            0.05,
            b_prep=no_drift_records,
        ),
    }
    rows = []
    try:
        for name in args.pairs:
            pair = pairs[name]
            if name == "noop":  # both moved and smoked, so the no-op is one
                run([*imgbuild, "build", "latest", "engram-mem", *opts], env=env)
            a, b = interleave(pair, args.rounds)
            rows.append((pair, a, b))
            print(f"  {name}: done ({load()})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        cleanup(engine)
    header = f"{'pair':<12} {'what':<72} {'median s':>9} {'min-max s':>13} {'ratio':>6} {'target':>7}"
    print(f"\n{header}\n{'-' * len(header)}")
    failed = 0
    for pair, a, b in rows:
        ratio = statistics.median(a) / statistics.median(b)
        verdict = "ok" if ratio <= pair.target else "MISSES"
        failed += verdict != "ok"
        print(f"{pair.name:<12} {pair.a_label:<72} {statistics.median(a):>9.3f} {spread(a):>13}")
        print(f"{'':<12} {pair.b_label:<72} {statistics.median(b):>9.3f} {spread(b):>13}", end="")
        print(f" {ratio:>6.2f} {pair.target:>6.2f}x {verdict}")
    print(f"\nend: {load()}")
    return 1 if failed else 0


def cleanup(engine: Engine) -> None:
    """Untag everything under REPO (the images themselves go with docker's own cleanup of untagged content)."""
    for img in engine.client.images.list(name=REPO):
        for tag in img.tags:
            if tag.startswith(f"{REPO}:"):
                engine.untag(tag)


if __name__ == "__main__":
    sys.exit(main())
