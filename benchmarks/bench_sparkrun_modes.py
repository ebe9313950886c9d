"""What crosses the control machine's link in sparkrun's `local` and `delegated` modes, for one imgbuild image.

    python3 benchmarks/bench_sparkrun_modes.py [--rounds 3]

The docker tier's engines (a session of its own): the synthetic project (tests/support/synth_images.py) on the
skeleton stand-in, built here; the head is a second dockerd on the containerd store behind a loopback sshd
(tests/support/node_daemon.py, tests/support/sshd.py), reached by sparkrun 0.4.2's own launch code
(tests/support/sparkrun_distribute.py: `prepare_images` + `stage_prepared_images`, builtin `docker save | ssh
docker load`, no OCI Relay). Each round, each mode, a fresh head holding only the skeleton base (as a Spark
holds the stock vLLM base it pulled once) and a fresh repository name:

- local: the control machine builds (its BuildKit cache warm from round 0, so the build is the variant's two
  small layers), then sparkrun sends the image to the head: the bytes are `docker save IMAGE | wc -c` (what the
  builtin path streams; it is all or nothing, base layers included);
- delegated: the plugin sends the project's files (`git ls-files | tar`, its bytes measured the same way) and
  runs `imgbuild build` on the head, which builds there against its own base; sparkrun then finds the head up to
  date.

Seconds are the driver's wall time (sparkrun's start-up included, the same on both sides). The head-to-worker
leg is the same `docker save | ssh docker load` of the same image in both modes (sparkrun's
`image_distribute.sh` on the head); it is not timed here (one node). Prints median and min-max per mode.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from imgbuild.builder import skeleton  # noqa: E402
from imgbuild.engine import Engine  # noqa: E402
from imgbuild.platforms import Platform  # noqa: E402
from imgbuild.upstream.git import GitRepo  # noqa: E402
from imgbuild.upstream.mirror import cache_dir  # noqa: E402
from tests.docker.test_sparkrun_distribution import DRIVER, PYTHON, recipe, sparkrun_env  # noqa: E402
from tests.support.node_daemon import node_daemon  # noqa: E402
from tests.support.sshd import sshd_to  # noqa: E402
from tests.support.synth import Upstream  # noqa: E402
from tests.support.synth_images import engram_project, release  # noqa: E402


def nbytes(shell: str) -> int:
    return int(subprocess.run(f"{shell} | wc -c", shell=True, capture_output=True, text=True, check=True).stdout)


def one(
    mode: str, tmp: Path, project: Path, repo: str, base: str, env_extra: dict[str, str], xdg: Path
) -> tuple[float, int]:
    engine = Engine.connect()
    with (
        node_daemon(tmp / "node", "br-imgb-bench", containerd_store=True, address="10.214.82.1/24") as node,
        sshd_to(tmp / "sshd", node.socket, env={"XDG_CACHE_HOME": str(xdg)}) as head,
    ):
        node.client().images.load(engine.client.images.get(base).save())  # the head has its base
        env = {**sparkrun_env(tmp / "sparkrun", head, tmp / "control-cache"), **env_extra}
        path = recipe(tmp / "recipe.yaml", project, repo)
        argv = [str(PYTHON), str(DRIVER), "--transfer-mode", mode, str(path), head.host]
        start = time.monotonic()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=1800)
        seconds = time.monotonic() - start
        if done.returncode != 0:
            raise SystemExit(f"{mode}: {done.stderr[-3000:]}")
        pinned = done.stdout.strip().splitlines()[-1].split('"head_image": "')[1].split('"')[0]
        if mode == "local":
            sent = nbytes(f"docker save {pinned}")
        else:
            # sparkrun_head.send_commands' pipeline (that module imports sparkrun, which this Python lacks)
            src = str(project)
            sent = nbytes(
                f"if git -C {src} rev-parse --is-inside-work-tree >/dev/null 2>&1; then "
                f"git -C {src} ls-files -z --cached --others --exclude-standard | tar -C {src} --null -T - -cf -; "
                f"else tar -C {src} -cf - .; fi"
            )
            assert engine.image(pinned) is None, "delegated built here"
    for ref in [t for i in engine.client.images.list(name=repo) for t in i.tags]:
        engine.client.images.remove(ref)
    return seconds, sent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    tmp = Path(tempfile.mkdtemp(prefix="bench-srmodes-"))
    try:
        up = Upstream(tmp / "upstream")
        release(up)
        commit = GitRepo(up.path).resolve_commit("v1.0.0")
        assert commit is not None
        spec = skeleton.SkeletonSpec(Platform.parse("linux/arm64"), commit)
        skeleton.ensure_skeleton(Engine.connect(), spec, [GitRepo(up.path)], cache_dir())
        head_cache = tmp / "head-cache" / "imgbuild" / "skeleton"
        head_cache.mkdir(parents=True)
        for tar in (cache_dir() / "skeleton").glob("rootfs-*.tar"):
            os.link(tar, head_cache / tar.name)
        results: dict[str, list[tuple[float, int]]] = {"local": [], "delegated": []}
        for r in range(rounds + 1):
            for mode in ("local", "delegated"):
                repo = f"imgbuild-bench-srm-{os.getpid()}-{r}-{mode}"
                project = engram_project(tmp / f"p-{r}-{mode}", up, repo)
                extra = {
                    "IMGBUILD_COMMAND": f"env PYTHONPATH={ROOT / 'src'} IMGBUILD_BASE=skeleton "
                    f"IMGBUILD_CACHE={tmp / 'head-cache' / 'imgbuild'} {sys.executable} -m imgbuild"
                }
                extra = extra if mode == "delegated" else {}
                got = one(mode, tmp / f"run-{r}-{mode}", project, repo, spec.tag, extra, tmp / "head-cache")
                if r:  # round 0 warms both sides' caches
                    results[mode].append(got)
                print(f"round {r} {mode}: {got[0]:.1f} s, {got[1]:,} bytes over the control link", flush=True)
        print(f"load: {os.getloadavg()}")
        for mode, rows in results.items():
            secs = [s for s, _ in rows]
            print(
                f"{mode:9} median {statistics.median(secs):.1f} s (min {min(secs):.1f}, max {max(secs):.1f}); "
                f"bytes over the control link {rows[0][1]:,}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
