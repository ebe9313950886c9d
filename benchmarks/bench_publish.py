"""`imgbuild publish` against the plain engine commands a user would type for the same result, on a loopback registry.

    python3 benchmarks/bench_publish.py [--rounds 5] [--platform linux/amd64]

The synthetic project (tests/support/synth_images.py) is built once on the
skeleton stand-in. Then, round after round, interleaved, each into a fresh
repository of one loopback `docker-registry`:

- A: `imgbuild publish engram-mem --base skeleton --platform P` (a build that
  finds the image current; for one platform it pushes the image's plain
  manifest under its immutable tag, then the same manifest under the moving
  tag: no index, none is made for one platform);
- B: what a user types for that result: `docker tag` + `docker push` of the
  immutable tag, then `docker tag` + `docker push` of the moving tag;
- C: the same with one push process: two `docker tag`, then
  `docker push --all-tags` of the repository.

All three push the same local image into a new repository of the same
registry, and after the rounds each side's repository is read back
(`imagetools inspect --raw` of both tags): the same digest, a plain manifest,
on every side, or the run fails. So the difference is imgbuild's own work:
the no-op build and the look-ups around the push. Caches, the same on every
side: the image built and in the local store, the registry empty of that
repository; imgbuild's own cache (its mirror and drift-check records) is warm
from the untimed build, and the hand sides need none. Round 0 is untimed (it
warms all). Prints median and min-max of each and the ratios A/B and A/C,
with the load. Needs the docker tier's set-up.

Before issue 36 B also made an index (`imagetools create`), read it back and
pointed the moving tag at it: work imgbuild does not do for one platform.
"""

from __future__ import annotations

import argparse
import hashlib
import json
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

from tests.support.registry_env import RegistryProcess, remove_images  # noqa: E402
from tests.support.synth import Upstream  # noqa: E402
from tests.support.synth_images import engram_project, release  # noqa: E402


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-600:]}")
    return proc.stdout


def same_result(repos: dict[str, list[str]], tags: tuple[str, ...]) -> str:
    """The one manifest digest every side's repositories name under every tag; fails on an index or a difference."""
    found: dict[tuple[str, str], set[str]] = {}
    for name, targets in repos.items():
        for target in targets:
            for t in tags:
                raw = subprocess.run(["docker", "buildx", "imagetools", "inspect", "--raw", f"{target}:{t}"],
                                     capture_output=True, check=True).stdout  # fmt: skip
                doc = json.loads(raw)
                if "manifests" in doc:
                    raise SystemExit(f"{target}:{t} is an index ({doc.get('mediaType', '')})")
                found.setdefault((name, t), set()).add("sha256:" + hashlib.sha256(raw).hexdigest())
    digests = set().union(*found.values())
    if len(digests) != 1:
        raise SystemExit(f"the sides pushed different manifests: {found}")
    return digests.pop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--platform", default="linux/amd64")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    env = {**os.environ, "IMGBUILD_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT / "src")}
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild" / "skeleton"
    user.mkdir(parents=True, exist_ok=True)
    (work / "cache").mkdir()
    (work / "cache" / "skeleton").symlink_to(user)  # the stand-in's rootfs (mmdebstrap, once), shared
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
    tag = local.rsplit(":", 1)[1]
    moving = "engram-mem"
    try:
        n = 0
        repos: dict[str, list[str]] = {"a": [], "b": [], "c": []}

        def a() -> None:
            nonlocal n
            n += 1
            repos["a"].append(f"{host}/a{n}/{repo}")  # a new registry path, the same local repository
            run([*imgbuild, "-C", str(project), "publish", "engram-mem", "--base", "skeleton", "--platform",
                 args.platform, "-r", f"{host}/a{n}", "--json"], env=env)  # fmt: skip

        def b() -> None:
            nonlocal n
            n += 1
            target = f"{host}/b{n}/{repo}"
            repos["b"].append(target)
            for t in (tag, moving):
                run(["docker", "tag", local, f"{target}:{t}"])
                run(["docker", "push", f"{target}:{t}"])

        def c() -> None:
            nonlocal n
            n += 1
            target = f"{host}/c{n}/{repo}"
            repos["c"].append(target)
            for t in (tag, moving):
                run(["docker", "tag", local, f"{target}:{t}"])
            run(["docker", "push", "--all-tags", target])

        sides = [("a", a), ("b", b), ("c", c)]
        times: dict[str, list[float]] = {"a": [], "b": [], "c": []}
        for i in range(args.rounds + 1):
            for name, fn in sides if i % 2 == 0 else list(reversed(sides)):
                t0 = time.perf_counter()
                fn()
                if i > 0:  # the first round warms all
                    times[name].append(time.perf_counter() - t0)
        end_load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        digest = same_result(repos, (tag, moving))
        print(f"{args.rounds} interleaved rounds, {args.platform}, load average {end_load} on {os.cpu_count()} cores")
        print(f"every side's repository: {tag} and {moving} name one plain manifest, {digest[:19]}")
        labels = (("a", "imgbuild publish"), ("b", "docker tag + push, twice"), ("c", "2x docker tag, push --all-tags"))
        for name, label in labels:
            t = times[name]
            print(f"  {label:34s} median {statistics.median(t):6.2f} s  (min {min(t):.2f}, max {max(t):.2f})")
        for ref in ("b", "c"):
            print(f"  ratio A/{ref.upper()} {statistics.median(times['a']) / statistics.median(times[ref]):.2f}x")
    finally:
        registry.stop()
        remove_images(host + "/")
        remove_images(repo)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
