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

Seconds are the driver's wall time (sparkrun's start-up included, the same on both sides). Prints median and
min-max per mode.

    python3 benchmarks/bench_sparkrun_modes.py --worker [--rounds 3]

adds a worker: a second node dockerd behind its own sshd (both holding the base), one ssh config naming both
(tests/support/sshd.py `cluster_config`), hosts `node1 node2`. Then sparkrun's distribution has two legs, and the
driver times its two steps apart (`prepare_s`: the builder; `stage_s`: the distribution). local: the control machine
streams the image to each host that lacks it (`docker save | ssh HOST docker load`, once per host: the bytes over
the control link are the image's times the hosts it streamed to, read from sparkrun's log); delegated: the head
builds, then sparkrun runs its `image_distribute.sh` on the head, the same `docker save | ssh node2 docker load` from
the head to the worker, which never touches the control machine's link. Bytes over each leg are `docker save IMAGE
| wc -c` in the engine that sends it. Both nodes are on this machine, so the head-to-worker leg is loopback too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.docker.test_sparkrun_distribution import DRIVER, PYTHON, recipe, sparkrun_env  # noqa: E402
from tests.support.node_daemon import node_daemon  # noqa: E402
from tests.support.sshd import cluster_config, sshd_to  # noqa: E402
from tests.support.synth import Upstream  # noqa: E402
from tests.support.synth_images import engram_project, release  # noqa: E402

from imgbuild.builder import skeleton  # noqa: E402
from imgbuild.cache import cache_dir  # noqa: E402
from imgbuild.engine import Engine  # noqa: E402
from imgbuild.platforms import Platform  # noqa: E402
from imgbuild.upstream.git import GitRepo  # noqa: E402


def nbytes(shell: str) -> int:
    return int(subprocess.run(f"{shell} | wc -c", shell=True, capture_output=True, text=True, check=True).stdout)


def one(
    mode: str,
    tmp: Path,
    project: Path,
    repo: str,
    base: str,
    env_extra: dict[str, str],
    xdg: Path,
    *,
    worker: bool = False,
) -> dict[str, float]:
    """One launch's preparation in `mode` on fresh nodes holding only the base: its seconds and bytes per link."""
    engine = Engine.connect()
    with contextlib.ExitStack() as stack:
        nodes = [
            stack.enter_context(
                node_daemon(tmp / "node", "br-imgb-bench", containerd_store=True, address="10.214.82.1/24")
            )
        ]
        logins = [stack.enter_context(sshd_to(tmp / "sshd", nodes[0].socket, env={"XDG_CACHE_HOME": str(xdg)}))]
        if worker:
            nodes.append(
                stack.enter_context(
                    node_daemon(tmp / "node2", "br-imgb-bench2", containerd_store=True, address="10.214.83.1/24")
                )
            )
            logins.append(stack.enter_context(sshd_to(tmp / "sshd2", nodes[1].socket, host="node2")))
        saved = b"".join(engine.client.images.get(base).save())
        for node in nodes:
            node.client().images.load(saved)  # each node has the base
        login = logins[0]
        if worker:
            login = dataclasses.replace(login, config=cluster_config(tmp / "cluster-ssh-config", logins))
        env = {**sparkrun_env(tmp / "sparkrun", login, tmp / "control-cache"), **env_extra}
        path = recipe(tmp / "recipe.yaml", project, repo)
        argv = [str(PYTHON), str(DRIVER), "--transfer-mode", mode, str(path), *(x.host for x in logins)]
        start = time.monotonic()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=1800)
        seconds = time.monotonic() - start
        if done.returncode != 0:
            raise SystemExit(f"{mode}: {done.stderr[-3000:]}")
        doc = json.loads(done.stdout.strip().splitlines()[-1])
        pinned = doc["head_image"]
        ids = {node.client().images.get(pinned).id for node in nodes}
        assert len(ids) == 1, f"{mode}: the nodes hold different images {ids}"
        image_bytes = nbytes(f"DOCKER_HOST={nodes[0].socket} docker save {pinned}")
        # the hosts sparkrun streamed the image to from here (run_pipeline_to_remotes_parallel logs each)
        streamed = set(re.findall(r"Pipeline <- (\S+) OK", done.stderr))
        if mode == "local":
            assert streamed == {x.host for x in logins}, f"local: streamed to {streamed}"
            sent = image_bytes * len(streamed)
        else:
            # sparkrun_head.send_commands' pipeline (that module imports sparkrun, which this Python lacks)
            src = str(project)
            sent = nbytes(
                f"if git -C {src} rev-parse --is-inside-work-tree >/dev/null 2>&1; then "
                f"git -C {src} ls-files -z --cached --others --exclude-standard | tar -C {src} --null -T - -cf -; "
                f"else tar -C {src} -cf - .; fi"
            )
            # the control machine never had the image (its one pipeline is the project's tar to the head)
            assert engine.image(pinned) is None, "delegated built here"
    for ref in [t for i in engine.client.images.list(name=repo) for t in i.tags]:
        engine.client.images.remove(ref)
    return {
        "seconds": seconds,
        "prepare_s": float(doc["prepare_s"]),
        "stage_s": float(doc["stage_s"]),
        "control_bytes": float(sent),
        "image_bytes": float(image_bytes),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help="a second node: the head-to-worker leg")
    args = parser.parse_args()
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
        results: dict[str, list[dict[str, float]]] = {"local": [], "delegated": []}
        for r in range(args.rounds + 1):
            for mode in ("local", "delegated"):
                repo = f"imgbuild-bench-srm-{os.getpid()}-{r}-{mode}"
                project = engram_project(tmp / f"p-{r}-{mode}", up, repo)
                extra = {
                    "IMGBUILD_COMMAND": f"env PYTHONPATH={ROOT / 'src'} IMGBUILD_BASE=skeleton "
                    f"IMGBUILD_CACHE={tmp / 'head-cache' / 'imgbuild'} {sys.executable} -m imgbuild"
                }
                extra = extra if mode == "delegated" else {}
                run = tmp / f"run-{r}-{mode}"
                got = one(mode, run, project, repo, spec.tag, extra, tmp / "head-cache", worker=args.worker)
                if r:  # round 0 warms both sides' caches
                    results[mode].append(got)
                line = (
                    f"round {r} {mode}: {got['seconds']:.1f} s, {got['control_bytes']:,.0f} bytes over the control link"
                )
                if args.worker:
                    line += f" (builder {got['prepare_s']:.1f} s, distribution {got['stage_s']:.1f} s)"
                print(line, flush=True)
        print(f"load: {os.getloadavg()}")
        for mode, rows in results.items():
            secs = [row["seconds"] for row in rows]
            print(
                f"{mode:9} median {statistics.median(secs):.1f} s (min {min(secs):.1f}, max {max(secs):.1f}); "
                f"bytes over the control link {rows[0]['control_bytes']:,.0f}"
            )
            if args.worker:
                stage = [row["stage_s"] for row in rows]
                build = [row["prepare_s"] for row in rows]
                leg = "control -> each of 2 hosts" if mode == "local" else "head -> worker"
                print(
                    f"{'':9} builder median {statistics.median(build):.1f} s (min {min(build):.1f}, max "
                    f"{max(build):.1f}); distribution median {statistics.median(stage):.1f} s (min {min(stage):.1f}, "
                    f"max {max(stage):.1f}); {leg}: {rows[0]['image_bytes']:,.0f} bytes"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
