#!/usr/bin/env python3
"""Benchmark `imgbuild build` against the deployment report's hand-written Dockerfile.

    python3 benchmarks/bench_build.py [--repeat 3] [--json]
    python3 benchmarks/bench_build.py --pairs   # issue 13's interleaved pairs, median and spread

On the local daemon, with the skeleton stand-in as the base (so it runs offline)
and the real project (falls back to a synthetic one if patches/ is empty):

1. engram-mem, latest present:
   - `imgbuild build engram-mem` (its layer is latest's bottom layer, already
     there; smoke test included), and with `--no-smoke`;
   - `imgbuild build engram-mem --force --no-smoke` (rebuilds the shared layer);
   - the report's Dockerfile (FROM latest, COPY of the three original Engram
     files, ENTRYPOINT []) with BuildKit and with the legacy builder, no cache.
2. A no-op rebuild of both variants (inputs unchanged).
3. Bytes: the layers each approach adds over the base, uncompressed (docker
   history) and gzip-compressed, against a gzip'd tar of the seven patched files.

Images go to the repository `imgbuild-bench/vllm-dsv41` and are removed at the end
(--keep keeps them). This is a script, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imgbuild.engine import Engine  # noqa: E402
from imgbuild.project import Project  # noqa: E402

REPO = "imgbuild-bench/vllm-dsv41"
ENGINE: Engine
SITE = "/usr/local/lib/python3.12/dist-packages"


def sh(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, env={**os.environ, **(env or {})}, input=stdin, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(args)}\n{proc.stderr.decode()[-2000:]}")
    return took


def imgbuild(*args: str) -> float:
    return sh(sys.executable, "-m", "imgbuild", "-C", str(ROOT), *args, "--base", "skeleton", "--repository", REPO)


SEEN: set[str] = set()  # every image id this run tagged in REPO, removed at the end unless --keep


def remember(engine: Engine) -> None:
    for img in engine.client.images.list(name=REPO):
        if any(t.startswith(REPO + ":") for t in img.tags):
            SEEN.add(img.id)


def cleanup(engine: Engine) -> None:
    """Untag REPO, then remove the images this run made that nothing else tags (children first)."""
    remember(engine)
    for img in engine.client.images.list(name=REPO):
        for tag in img.tags:
            if tag.startswith(REPO + ":"):
                engine.untag(tag)
    for _ in range(8):
        left = [i for i in SEEN if engine.image(i) is not None]
        if not left:
            return
        for image_id in left:
            # no force: an image still tagged elsewhere (e.g. a shared layer) stays; a child may hold it this pass
            with contextlib.suppress(Exception):
                engine.client.api.remove_image(image_id)


def drop(engine: Engine, variant: str) -> None:
    """Remove a variant's tags (moving and immutable) so the next build has to make them."""
    for img in engine.client.images.list(name=REPO):
        if img.labels.get("imgbuild.variant") == variant:
            for tag in img.tags:
                if tag.startswith(REPO + ":") and ":layer-" not in tag:
                    engine.untag(tag)


def timed(label: str, fn, repeat: int, before=None) -> dict[str, object]:  # type: ignore[no-untyped-def]
    runs = []
    for _ in range(repeat):
        if before:
            before()
        runs.append(fn())
        remember(ENGINE)
    out = {"what": label, "runs_s": [round(r, 2) for r in runs], "median_s": round(statistics.median(runs), 2)}
    print(f"  {label:72} median {out['median_s']:6.2f} s  ({', '.join(f'{r:.2f}' for r in runs)})")
    return out


def seed_context(project: Project) -> bytes:
    """The report's build: FROM latest, COPY the three original Engram files, ENTRYPOINT []."""
    mem = project.plan(["engram-mem"])[0]
    originals = [f for f in mem.files if f.state == "original"]
    lines = [f"FROM {REPO}:latest"]
    lines += [f"COPY vllm/{f.path} {SITE}/{f.path}" for f in originals]
    lines.append("ENTRYPOINT []")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [("Dockerfile", ("\n".join(lines) + "\n").encode())] + [
            (f"vllm/{f.path}", mem.contents[f.path]) for f in originals
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def layer_bytes(engine: Engine, ref: str, skip: int) -> tuple[int, int]:
    """(uncompressed, gzip) bytes of the layers of `ref` above its bottom `skip` layers."""
    info = engine.require(ref)
    top = set(info.layers[skip:])
    raw = gz = 0
    with tempfile.TemporaryFile() as fh:
        for chunk in engine.client.images.get(ref).save(named=False):
            fh.write(chunk)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
            config = json.load(tar.extractfile(manifest[0]["Config"]))  # type: ignore[arg-type]
            for diff_id, path in zip(config["rootfs"]["diff_ids"], manifest[0]["Layers"], strict=True):
                if diff_id in top:
                    data = tar.extractfile(path).read()  # type: ignore[union-attr]
                    raw += len(data)
                    gz += len(gzip.compress(data, 6))
    return raw, gz


def patched_files_gz(project: Project) -> tuple[int, int]:
    latest = project.plan(["latest"])[0]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in latest.files:
            data = latest.contents[f.path]
            info = tarfile.TarInfo(f.path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = sum(len(latest.contents[f.path]) for f in latest.files)
    return raw, len(gzip.compress(buf.getvalue(), 6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the images afterwards")
    ap.add_argument("--pairs", action="store_true", help="run issue 13's interleaved pairs (bench_build_pairs.py)")
    args = ap.parse_args()
    if args.pairs:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import bench_build_pairs

        sys.argv = [sys.argv[0], "--rounds", str(max(args.repeat, 5))]
        sys.exit(bench_build_pairs.main())
    global ENGINE
    engine = ENGINE = Engine.connect()
    project = Project.load(ROOT)
    if not project.patches:
        sys.exit("patches/series is empty: nothing to benchmark")
    results: dict[str, object] = {"project": str(ROOT), "patches": len(project.patches), "timings": []}
    timings: list[dict[str, object]] = results["timings"]  # type: ignore[assignment]

    print("setup: skeleton base and latest (not timed)")
    sh(sys.executable, "-m", "imgbuild", "-C", str(ROOT), "skeleton")
    imgbuild("build", "latest")
    base_layers = len(engine.require(REPO + ":latest").layers) - 2

    print(f"1. engram-mem with {REPO}:latest present ({args.repeat} runs each)")
    timings.append(
        timed(
            "imgbuild build engram-mem (shared layer reused; smoke included)",
            lambda: imgbuild("build", "engram-mem"),
            args.repeat,
            lambda: drop(engine, "engram-mem"),
        )
    )
    timings.append(
        timed(
            "imgbuild build engram-mem --no-smoke",
            lambda: imgbuild("build", "engram-mem", "--no-smoke"),
            args.repeat,
            lambda: drop(engine, "engram-mem"),
        )
    )
    timings.append(
        timed(
            "imgbuild build engram-mem --force --no-smoke (rebuilds the shared layer)",
            lambda: imgbuild("build", "engram-mem", "--force", "--no-smoke"),
            args.repeat,
        )
    )
    imgbuild("build", "latest", "engram-mem")  # back to a consistent, smoked state
    ctx = seed_context(project)
    timings.append(
        timed(
            "report's Dockerfile, BuildKit (buildx --load --no-cache)",
            lambda: sh(
                "docker",
                "buildx",
                "build",
                "--platform",
                "linux/arm64",
                "--load",
                "--no-cache",
                "-t",
                f"{REPO}:seed-buildkit",
                "-",
                stdin=ctx,
            ),
            args.repeat,
        )
    )
    timings.append(
        timed(
            "report's Dockerfile, legacy builder (DOCKER_BUILDKIT=0 --no-cache)",
            lambda: sh(
                "/usr/bin/docker",
                "build",
                "--platform",
                "linux/arm64",
                "--no-cache",
                "-q",
                "-t",
                f"{REPO}:seed-legacy",
                "-",
                stdin=ctx,
                env={"DOCKER_BUILDKIT": "0"},
            ),
            args.repeat,
        )
    )

    print("2. no-op rebuilds (inputs unchanged)")
    timings.append(timed("imgbuild build engram-mem", lambda: imgbuild("build", "engram-mem"), args.repeat))
    timings.append(
        timed("imgbuild build latest engram-mem", lambda: imgbuild("build", "latest", "engram-mem"), args.repeat)
    )

    print("3. bytes added over the base")
    raw7, gz7 = patched_files_gz(project)
    sizes = {
        "seven patched files (raw / tar.gz)": (raw7, gz7),
        "imgbuild latest: layers 0+1 (= both images: layer 0 is stored once)": layer_bytes(
            engine, f"{REPO}:latest", base_layers
        ),
        "imgbuild engram-mem: layer 0 (latest's own bottom layer)": layer_bytes(
            engine, f"{REPO}:engram-mem", base_layers
        ),
        "report: engram-mem = latest + a layer of 3 originals (extra)": layer_bytes(
            engine, f"{REPO}:seed-buildkit", len(engine.require(f"{REPO}:latest").layers)
        ),
    }
    for what, (raw, gz) in sizes.items():
        print(f"  {what:72} {raw:>9,} B raw  {gz:>8,} B gzip")
    results["bytes"] = {k: {"raw": r, "gzip": g} for k, (r, g) in sizes.items()}
    layers = {t: len(engine.require(f"{REPO}:{t}").layers) for t in ("latest", "engram-mem", "seed-buildkit")}
    results["rootfs_layers"] = layers
    print(f"  RootFS layers: {layers} (base has {base_layers})")
    if args.json:
        print(json.dumps(results, indent=2))
    if not args.keep:
        cleanup(engine)


if __name__ == "__main__":
    main()
