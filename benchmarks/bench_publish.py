"""`imgbuild publish` against the plain engine commands it stands for, on a loopback registry.

    python3 benchmarks/bench_publish.py [--rounds 5] [--platform linux/amd64]

The synthetic project (tests/support/synth_images.py) is built once on the
skeleton stand-in. Then, round after round, interleaved, each into a fresh
repository of one loopback `docker-registry`:

- A: `imgbuild publish engram-mem --base skeleton --platform P` (a build that
  finds the image current, the push, the index and the moving tag);
- B: `docker push` of the same local image, then `docker buildx imagetools
  create` of the index and of the moving tag.

Both push the same image into a new repository of the same registry, so the
difference is imgbuild's own work: the no-op build and the look-ups around
the push. Caches, the same on both sides: the image built and in the local
store, the registry empty of that repository; imgbuild's own cache (its
mirror and drift-check records) is warm from the untimed build, and the hand
side needs none. Round 0 is untimed (it warms both). Prints median and
min-max of each and the ratio A/B, with the load. Needs the docker tier's
set-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.support.registry_env import RegistryProcess, remove_images  # noqa: E402
from tests.support.synth import Upstream  # noqa: E402
from tests.support.synth_images import engram_project, release  # noqa: E402


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-600:]}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--platform", default="linux/amd64")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    env = {**os.environ, "IMGBUILD_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT / "src")}
    imgbuild = [sys.executable, "-m", "imgbuild"]
    upstream = Upstream(work / "upstream")
    release(upstream)
    repo = f"bench-publish-{os.getpid()}"
    project = engram_project(work / "project", upstream, repo)
    build = [*imgbuild, "-C", str(project), "build", "engram-mem", "--base", "skeleton", "--platform", args.platform]
    built = json.loads(run([*build, "--json"], env=env))
    local = built["images"][0]["immutable"]
    registry = RegistryProcess.start(work / "registry")
    host = registry.host
    try:
        n = 0

        def a() -> None:
            nonlocal n
            n += 1
            run([*imgbuild, "-C", str(project), "publish", "engram-mem", "--base", "skeleton", "--platform",
                 args.platform, "-r", host, "--repository", f"a{n}/x", "--json"], env=env)  # fmt: skip

        def b() -> None:
            nonlocal n
            n += 1
            target = f"{host}/b{n}/x"
            tag = local.rsplit(":", 1)[1]
            run(["docker", "tag", local, f"{target}:{tag}"])
            out = run(["docker", "push", f"{target}:{tag}"])
            digest = out.split("digest: ")[-1].split()[0]
            run(["docker", "buildx", "imagetools", "create", "-t", f"{target}:index", f"{target}@{digest}"])
            index = run(["docker", "buildx", "imagetools", "inspect", "--format", "{{json .Manifest}}",
                         f"{target}:index"])  # fmt: skip
            run(["docker", "buildx", "imagetools", "create", "-t", f"{target}:engram-mem",
                 f"{target}@{json.loads(index)['digest']}"])  # fmt: skip

        times: dict[str, list[float]] = {"a": [], "b": []}
        for i in range(args.rounds + 1):
            order = [("a", a), ("b", b)] if i % 2 == 0 else [("b", b), ("a", a)]
            for name, fn in order:
                t0 = time.perf_counter()
                fn()
                if i > 0:  # the first round warms both
                    times[name].append(time.perf_counter() - t0)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"{args.rounds} interleaved rounds, {args.platform}, load average {load} on {os.cpu_count()} cores")
        for name, label in (("a", "imgbuild publish"), ("b", "docker push + imagetools create")):
            t = times[name]
            print(f"  {label:34s} median {statistics.median(t):6.2f} s  (min {min(t):.2f}, max {max(t):.2f})")
        print(f"  ratio {statistics.median(times['a']) / statistics.median(times['b']):.2f}x")
    finally:
        registry.stop()
        remove_images(host + "/")
        remove_images(repo)


if __name__ == "__main__":
    main()
