"""Publishing engram-mem when its base is already in the registry: registry-native vs `docker push`.

    python3 benchmarks/bench_publish.py [--platform linux/arm64] [--runs 3]

Needs the docker tier (dockerd, buildx, docker-registry; `.ci/setup-host.sh`)
and the pinned release in the cache. Everything runs on loopback:

1. a docker-registry, with a counting TCP proxy in front of it that every
   client (imgbuild and the docker daemon) talks to, so "bytes up" is what
   went over the wire, HTTP headers included;
2. the base: the skeleton stand-in of the pinned release (Debian rootfs +
   the release's vllm/ tree), pushed with `docker push`;
3. a copy of this project whose base is that image, locked with `imgbuild lock`;
4. fast path: `imgbuild publish engram-mem` (in-process, timed), then again
   (idempotent);
5. baseline: the same image built with `docker buildx bake --load` from the
   bake file, then `docker push` to another repository of the same registry
   (docker mounts the base layers it pushed itself, so this is its best case).

It prints the minimum that must go up (the new layer, the configs, the
manifests and the index), what each path sent, their ratio, and the times.
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
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_pairs import Pair, interleave, load, spread  # noqa: E402
from tests.support.registry_env import RegistryProcess, docker, remove_images, set_platforms  # noqa: E402
from tests.support.tcpproxy import Proxy  # noqa: E402

from imgbuild.images import publish as pub
from imgbuild.images.build import skeleton_spec  # noqa: E402
from imgbuild.images.docker import Engine  # noqa: E402
from imgbuild.registry.lock import load_lock  # noqa: E402
from imgbuild.project import Project  # noqa: E402
from imgbuild.images.skeleton import ensure_skeleton  # noqa: E402


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild"


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default="linux/arm64")
    parser.add_argument("--runs", type=int, default=3, help="fast-path publishes into fresh repositories")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the whole-command pair")
    args = parser.parse_args()
    os.environ.pop("IMGBUILD_CACHE", None)
    tmp = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    registry = RegistryProcess.start(tmp / "registry")
    proxy = Proxy(registry.port)
    engine = Engine.connect()
    try:
        project_dir = tmp / "project"
        shutil.copytree(ROOT, project_dir, ignore=shutil.ignore_patterns(".git", "buildkit", ".*cache*", ".venv"))
        (project_dir / "images.lock").unlink(missing_ok=True)
        project = Project.load(project_dir)
        spec = skeleton_spec(project, project.variants["latest"].image.site_packages, args.platform)
        t0 = time.perf_counter()
        info = ensure_skeleton(engine, spec, project.upstream.repo, user_cache())
        print(f"base: skeleton {spec.tag} ({info.size / 1e6:.0f} MB) ready in {time.perf_counter() - t0:.1f}s")
        base = f"{proxy.host}/vllm/vllm-openai:v0.33.0"
        engine.tag(info.id, base)
        proxy.reset()
        t0 = time.perf_counter()
        docker("push", base)
        print(f"base pushed with docker push: {proxy.bytes_up / 1e6:.1f} MB up in {time.perf_counter() - t0:.1f}s")
        set_platforms(project_dir, [args.platform], base=base)
        run([sys.executable, "-m", "imgbuild", "lock"], project_dir)

        # -- fast path ------------------------------------------------------------
        times, push_times, wire, bodies = [], [], [], []
        minimum = 0
        for i in range(args.runs):
            proxy.reset()
            t0 = time.perf_counter()
            regs = pub.Registries()
            proj = Project.load(project_dir)
            lock = load_lock(project_dir)
            assert lock is not None
            selection = proj.select(["engram-mem"], default="declared")
            plan = pub.plan_publish(proj, lock, selection, proxy.host, regs, repository=f"fast{i}/vllm-dsv41")
            t1 = time.perf_counter()
            outcomes = [pub.push_variant(vp, regs, say=lambda _: None) for vp in plan]
            t2 = time.perf_counter()
            stats = regs.stats()
            regs.close()
            times.append(t2 - t0)
            push_times.append(t2 - t1)
            wire.append(proxy.bytes_up)
            bodies.append(stats.bytes_up)
            vp = plan[0]
            layer_bytes = sum(lay.blob.size for pi in vp.images for lay in pi.layers)
            configs = sum(pi.config.size for pi in vp.images)
            manifests = sum(pi.manifest.size for pi in vp.images) + vp.index.size * (1 + len(vp.moving_tags))
            minimum = layer_bytes + configs + manifests
            assert outcomes[0].state == "published"
        proxy.reset()
        t0 = time.perf_counter()
        proj = Project.load(project_dir)
        selection = proj.select(["engram-mem"], default="declared")
        outcomes = pub.publish(proj, selection, proxy.host, repository="fast0/vllm-dsv41", say=lambda _: None).outcomes
        assert outcomes is not None
        again_time, again_wire = time.perf_counter() - t0, proxy.bytes_up
        assert outcomes[0].state == "unchanged"

        # -- docker push ------------------------------------------------------------
        run([sys.executable, "-m", "imgbuild", "bake"], project_dir)
        bake = ["docker", "buildx", "bake", "-f", "buildkit/docker-bake.json", "--load"]
        run(
            [*bake, "--set", f"*.platform={args.platform}", "engram-mem"],
            project_dir,
            env={"REGISTRY": "imgbuild-bench"},
        )
        pushed = f"{proxy.host}/docker/vllm-dsv41:engram-mem"
        engine.tag(engine.require("imgbuild-bench/vllm-dsv41:engram-mem").id, pushed)
        proxy.reset()
        t0 = time.perf_counter()
        docker("push", pushed)
        docker_time, docker_wire = time.perf_counter() - t0, proxy.bytes_up

        # -- the pair, interleaved: whole commands, each round into fresh repositories ----------------
        rounds = {"a": 0, "b": 0}

        def publish_cmd() -> None:
            rounds["a"] += 1
            registry_path = f"{proxy.host}/pair-a{rounds['a']}"
            run([sys.executable, "-m", "imgbuild", "publish", "engram-mem", "-r", registry_path], project_dir)

        def push_cmd() -> None:
            rounds["b"] += 1
            ref = f"{proxy.host}/pair-b{rounds['b']}/vllm-dsv41:engram-mem"
            engine.tag(engine.require(pushed).id, ref)
            docker("push", ref)

        pair = Pair(
            "publish",
            "imgbuild publish engram-mem (base in the registry)",
            publish_cmd,
            "docker push of the same image (base pushed before)",
            push_cmd,
            1.0,
        )
        a_times, b_times = interleave(pair, args.rounds)

        print()
        print(f"engram-mem ({args.platform}), base already in the registry; loopback; {args.runs} fast-path runs")
        print(f"  new layer + configs + manifests (minimum):  {minimum:>9} bytes")
        print(f"  fast path, request bodies:                  {statistics.median(bodies):>9.0f} bytes "
              f"({statistics.median(bodies) / minimum:.2f}x the minimum)")  # fmt: skip
        print(f"  fast path, on the wire (headers included):  {statistics.median(wire):>9.0f} bytes "
              f"({statistics.median(wire) / minimum:.2f}x)")  # fmt: skip
        print(f"  fast path, time:                            {statistics.median(times):>9.3f} s (median; "
              f"min {min(times):.3f}, max {max(times):.3f})")  # fmt: skip
        print(f"    of which uploading (plan excluded):       {statistics.median(push_times):>9.3f} s (median)")
        print(f"  fast path again (idempotent):               {again_wire:>9} bytes, {again_time:.3f} s")
        print(f"  docker push, on the wire:                   {docker_wire:>9} bytes ({docker_wire / minimum:.2f}x)")
        print(f"  docker push, time:                          {docker_time:>9.3f} s (build not included)")
        ratio = statistics.median(a_times) / statistics.median(b_times)
        print(f"\npair, {args.rounds} interleaved rounds (whole commands, fresh repositories each round; {load()}):")
        print(f"  {pair.a_label:<52} median {statistics.median(a_times):.3f} s ({spread(a_times)})")
        print(f"  {pair.b_label:<52} median {statistics.median(b_times):.3f} s ({spread(b_times)})")
        print(f"  ratio {ratio:.2f} (target {pair.target:.1f}x: {'ok' if ratio <= pair.target else 'MISSES'})")
    finally:
        proxy.close()
        registry.stop()
        remove_images(proxy.host + "/")
        remove_images("imgbuild-bench/")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
