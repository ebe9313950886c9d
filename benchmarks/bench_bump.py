"""Issue 34: the runtime base's release bump, package-granular layers (this tree) against the single `COPY tree/`
layer (the tree before issue 34), amd64.

    python3 benchmarks/bench_bump.py --paths layered --push --cache DIR     # real size, layered only
    python3 benchmarks/bench_bump.py --cycle                                 # real size, both paths in turn
    python3 benchmarks/bench_bump.py --analyze                               # layer identity by key: no docker
    python3 benchmarks/bench_bump.py --subset-mb 100 --bumps release vllm --rounds 2   # both paths, interleaved
    python3 benchmarks/bench_bump.py --check                                 # the locks only

Locks (in a temp folder, never in images/runtime-lock): `base` is the repository's 0.33.0 lock (images/runtime-lock/
linux-amd64.txt at LOCK33_REV, the commit before the 0.34.0 relock); `release` the 0.34.0 lock (that file at
LOCK34_REV); `vllm` the 0.33.0 lock with only vllm's pin (and hashes) from the 0.34.0 lock; `torch` the 0.33.0 lock
with only torch's pin replaced by torch 2.13.0 (hashes from `uv pip compile --no-deps --generate-hashes`). Runs
before 2026-12-05 took the 0.34.0 lock from /tmp/lock34-x86_64.txt (the lead's first resolution), which differs.
Every wheel of every lock is put in uv's cache before anything is timed (same caches on both sides).

Real size (default mode): per path, the `base` lock's runtime base (the "0.33.0 present" state), then each bump's,
timed (wall of the whole `ensure_runtime`: install on the host, layers, BuildKit). Per bump: new bytes in the local
store (the bump image's layer blobs the base image lacks: the content store keeps blobs by digest), the bytes of the
layers from the first differing one up (what a snapshotter unpacks again: it keys layers by their chain), and with
`--push` both images pushed to a loopback docker-registry: the growth of its blob storage and its blob uploads for
the bump's push (what a node holding the base pulls: the same blob set). Each bump starts from the layer cache as
a node that built only the base has it; each path from an empty BuildKit cache, its images and layer cache removed
after it (two real-size paths do not fit the shared disk at once, so they run one after the other, not
interleaved). `--cycle`: both variants built and smoke-tested on each bump whose vllm and flashinfer-python are the
project's (`imgbuild build latest engram-mem --base TAG`, this tree's code on both paths), timed apart from the base;
on another bump imgbuild refuses to build (base drift: the patched files would mix releases).

`--analyze`: each lock installed (hard links into uv's cache), split, and each layer identified by its cache key
(pins + files), as the docker test shows equal keys give equal digests: per bump the changed layers, their bytes,
and what a node re-unpacks in this tree's order (`size_order`: dependency height, then largest first; the name is
kept for the results' sake), in the order before that (`largest_first`) and in the first commit's (`name_order`).

`--subset-mb N`: the same locks without the dists larger than N MiB installed (vllm and flashinfer-python kept,
and torch when a torch bump is asked for),
so that the single-layer path fits the shared disk twice: both paths' bases, then each bump on both paths
alternately (reversed on odd rounds), bump images removed after measuring; `docker save | wc -c` of each bump
image (what sparkrun's built-in save/load distribution sends to a node, whatever the node holds). With `--node`,
each path's base and each bump image are pushed to a loopback docker-registry, and a second dockerd standing for a
node (tests/support/node_daemon.py: containerd image store, its own data root) pulls the path's base once, then
each bump: the bytes of the blob GETs the registry logs for that pull (what the node fetched), the pull's wall
time, and the blob uploads of the push (after the first round the registry holds them: 0). The node removes the
bump image after each pull, so every round's pull starts from a node holding the base only.

Each side runs in its own process with PYTHONPATH set to its code: this tree's src, or --old-src (the tree
before issue 34: `git worktree add --detach /tmp/before cc08260`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCK_PATH = "images/runtime-lock/linux-amd64.txt"
LOCK33_REV = "ba9817b^"  # vllm 0.33.0
LOCK34_REV = "ba9817b"  # vllm 0.34.0, flashinfer-python 0.7.4, relocked with uv
TORCH = "2.13.0"
CTR = ["ctr", "-a", "/var/run/docker/containerd/containerd.sock", "-n", "moby"]
UV_TARGET = ["--python-platform", "x86_64-manylinux_2_36", "--python-version", "3.11", "--only-binary", ":all:"]
DRIVER = """
import json, sys, time
from pathlib import Path
from imgbuild.builder import runtime_base as rb, runtime_lock as rl
from imgbuild.engine import Engine
from imgbuild.platforms import Platform
p = Platform.parse("linux/amd64")
lock = rl.parse_lock(Path(sys.argv[1]).read_text(), Path(sys.argv[1]), p)
t0 = time.monotonic()
res = rb.ensure_runtime(Engine.connect(), rb.RuntimeSpec(p, lock), Path(sys.argv[2]))
print(json.dumps({"tag": rb.RuntimeSpec(p, lock).tag, "id": res.info.id, "built": res.built,
                  "seconds": time.monotonic() - t0}))
"""


def sh(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, text=True, capture_output=True, check=False, input=stdin)


def git_show(rev: str, path: str) -> str:
    done = sh(["git", "-C", str(ROOT), "show", f"{rev}:{path}"])
    assert done.returncode == 0, done.stderr
    return done.stdout


def blocks(text: str) -> dict[str, str]:
    """A lock's requirements by name: `name==version \\ --hash ...` blocks, as written."""
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    out: dict[str, str] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", body):
        if block.strip():
            out[block.split("==", 1)[0].strip().lower()] = block.rstrip() + "\n"
    return out


def header(text: str) -> str:
    return "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("#"))


def write_lock(path: Path, head: str, pins: dict[str, str]) -> Path:
    path.write_text(head + "".join(pins[k] for k in sorted(pins)))
    return path


def make_locks(work: Path) -> dict[str, Path]:
    base_text = git_show(LOCK33_REV, LOCK_PATH)
    base, new = blocks(base_text), blocks(git_show(LOCK34_REV, LOCK_PATH))
    args = ["uv", "pip", "compile", "-", "--no-deps", "--generate-hashes", "--no-header", "--no-annotate"]
    torch = sh([*args, "--no-config", *UV_TARGET], stdin=f"torch=={TORCH}\n")
    assert torch.returncode == 0, torch.stderr
    locks = {
        "base": base,
        "release": new,
        "vllm": {**base, "vllm": new["vllm"]},
        "torch": {**base, "torch": blocks(torch.stdout)["torch"]},
    }
    return {name: write_lock(work / f"lock-{name}.txt", header(base_text), pins) for name, pins in locks.items()}


def install(lock: Path, target: Path) -> None:
    args = ["uv", "pip", "install", "--no-config", "--require-hashes", "--no-deps", "--link-mode", "hardlink"]
    done = sh([*args, "--python", sys.executable, "--target", str(target), "-r", str(lock), *UV_TARGET])
    assert done.returncode == 0, done.stderr[-2000:]
    (target / ".lock").unlink(missing_ok=True)


# -- layer identity without docker ----------------------------------------------------
def plans(lock: Path, work: Path) -> list[dict[str, Any]]:
    """The layers this tree's split makes of `lock` (installed with hard links into uv's cache, then removed): name,
    key (the cache key; for `unowned` its files' names and sizes), bytes, members; in the split's order."""
    sys.path.insert(0, str(ROOT / "src"))
    from imgbuild.builder import runtime_base as rb
    from imgbuild.builder import runtime_layers as layers
    from imgbuild.builder import runtime_lock as rl
    from imgbuild.platforms import Platform

    tree = work / "tree"
    install(lock, tree)
    try:
        pins = rb.pin_keys(rl.parse_lock(lock.read_text(), lock, Platform.parse("linux/amd64")))
        out = []
        for plan in layers.split(layers.read_dists(tree), layers.walk_files(tree), last=["vllm"]):
            sizes = {f: (tree / f).lstat().st_size for f in plan.files}
            key = rb.layer_key(plan, pins, "bench") or "|".join(f"{f}:{n}" for f, n in sizes.items())
            out.append({"name": plan.name, "key": key, "bytes": sum(sizes.values()), "members": plan.members})
    finally:
        shutil.rmtree(tree)
    return out


def by_name_order(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The order of issue 34's first commit (b178280): pkg-* by name, buckets, unowned, vllm's layer last."""
    rank = {"pkg": 0, "bucket": 1, "unowned": 2}
    return sorted(layers, key=lambda x: ("vllm" in x["members"], rank[x["name"].split("-")[0]], x["name"]))


def largest_first(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The order before dependency height (2026-12-04): pkg-* largest first, buckets, unowned, vllm's layer last."""
    rank = {"pkg": 0, "bucket": 1, "unowned": 2}
    return sorted(layers, key=lambda x: ("vllm" in x["members"], rank[x["name"].split("-")[0]], -x["bytes"], x["name"]))


def key_diff(base: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, int]:
    have = {x["key"] for x in base}
    first = next((i for i, (a, b) in enumerate(zip(base, new, strict=False)) if a["key"] != b["key"]), len(new))
    return {
        "layers": len(new),
        "tree_bytes": sum(x["bytes"] for x in new),
        "new_layers": sum(1 for x in new if x["key"] not in have),
        "new_bytes": sum(x["bytes"] for x in new if x["key"] not in have),
        "reunpacked_bytes": sum(x["bytes"] for x in new[first:]),
    }


def analyze(locks: dict[str, Path], bumps: list[str], work: Path, lines: list[str]) -> None:
    base = plans(locks["base"], work)
    for bump in bumps:
        new = plans(locks[bump], work)
        row = {
            "size_order": key_diff(base, new),
            "name_order": key_diff(by_name_order(base), by_name_order(new)),
            "largest_first": key_diff(largest_first(base), largest_first(new)),
            "changed": sorted(x["name"] for x in new if x["key"] not in {b["key"] for b in base}),
        }
        lines.append(f"analyze {bump}: " + json.dumps(row, sort_keys=True))
        print(lines[-1], flush=True)


def subset_locks(locks: dict[str, Path], work: Path, mb: int, keep: tuple[str, ...]) -> dict[str, Path]:
    sizes = {x["members"][0]: x["bytes"] for x in plans(locks["base"], work) if x["name"].startswith("pkg-")}
    drop = {n for n, b in sizes.items() if b > mb * 1024 * 1024 and n not in keep}
    out = {}
    for name, path in locks.items():
        text = path.read_text()
        kept = {k: v for k, v in blocks(text).items() if k not in drop}
        out[name] = write_lock(work / f"subset-{name}.txt", header(text), kept)
    return out


# -- images ---------------------------------------------------------------------
def layers_of(image_id: str) -> list[tuple[str, int]]:
    done = sh([*CTR, "content", "get", image_id])
    assert done.returncode == 0, done.stderr
    return [(lay["digest"], lay["size"]) for lay in json.loads(done.stdout)["layers"]]


def diff(base: list[tuple[str, int]], new: list[tuple[str, int]]) -> dict[str, int]:
    have = {d for d, _ in base}
    first = next((i for i, (a, b) in enumerate(zip(base, new, strict=False)) if a != b), min(len(base), len(new)))
    return {
        "layers": len(new),
        "image_bytes": sum(s for _, s in new),
        "new_layers": sum(1 for d, _ in new if d not in have),
        "new_bytes": sum(s for d, s in new if d not in have),
        "reunpacked_bytes": sum(s for _, s in new[first:]),
    }


def build(src: Path, lock: Path, cache: Path, log: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src), "IMGBUILD_CACHE": str(cache)}
    t0 = time.monotonic()
    with log.open("a") as err:
        done = subprocess.run([sys.executable, "-c", DRIVER, str(lock), str(cache)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=err, check=False)  # fmt: skip
    wall = time.monotonic() - t0
    assert done.returncode == 0, f"build failed, see {log}"
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


def registry_bytes(root: Path) -> int:
    blobs = root / "docker" / "registry" / "v2" / "blobs"
    return sum(p.stat().st_size for p in blobs.rglob("data")) if blobs.is_dir() else 0


class Registry:
    def __init__(self, where: Path) -> None:
        sys.path.insert(0, str(ROOT))
        from tests.support.registry_env import RegistryProcess

        self.proc = RegistryProcess.start(where)
        self.dir = where

    def push(self, image: str, name: str) -> dict[str, float]:
        ref = f"{self.proc.host}/{name}"
        before, mark, t0 = registry_bytes(self.dir), self.proc.log_mark(), time.monotonic()
        assert sh(["docker", "tag", image, ref]).returncode == 0
        done = sh(["docker", "push", ref])
        assert done.returncode == 0, done.stderr[-2000:]
        puts = [r for r in self.proc.requests_since(mark) if r[0] == "PUT" and "/blobs/uploads/" in r[1]]
        sh(["docker", "rmi", ref])
        took = time.monotonic() - t0
        return {"push_s": took, "pushed_bytes": registry_bytes(self.dir) - before, "blob_uploads": len(puts)}


def prune_contexts(path: str) -> None:
    """After every build: BuildKit's copies of build contexts (a single-layer build sends its whole staged tree, from
    a new temporary folder each time, so no later build can reuse it), and on the single-layer path every record:
    its `COPY tree/` keeps the 9 GB tree in BuildKit's cache after `docker rmi`, and the next bump's tree differs
    (that path's next build then adds the 0.2 GB rootfs again, as one on a new release would). Else the disk fills."""
    if path == "single":
        sh(["docker", "builder", "prune", "-af"])
    else:
        sh(["docker", "builder", "prune", "-f", "--filter", "type=source.local"])


def cycle(tag: str, path: str) -> dict[str, Any]:
    """Both variants built on `tag` and smoke-tested (`imgbuild build latest engram-mem --base TAG`: this tree's
    code and project, the user's cache), timed; then their images removed."""
    repo = f"bench-bump-{path}/vllm-dsv41"
    cmd = [sys.executable, "-m", "imgbuild", "-C", str(ROOT), "build", "latest", "engram-mem", "--base", tag,
           "--platform", "linux/amd64", "--repository", repo, "--json"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "IMGBUILD_CACHE"}
    env["PYTHONPATH"] = str(ROOT / "src")
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=env, text=True, capture_output=True, check=False)
    took = time.monotonic() - t0
    assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-1500:]}"
    images = json.loads(done.stdout)["images"]
    smoked = [i["variant"] for i in images if isinstance(i.get("smoke"), dict) and i["smoke"].get("ok")]
    assert len(smoked) == 2, f"not both variants smoke-tested: {done.stdout[-1500:]}"
    base_layers = {d for d, _ in layers_of(image_id(tag))}
    own = {d: s for i in images for d, s in layers_of(image_id(i["immutable"])) if d not in base_layers}
    refs = sh(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", repo]).stdout.split()
    sh(["docker", "rmi", *refs])
    return {"cycle_variants_s": took, "cycle_smoked": smoked, "cycle_variant_new_bytes": sum(own.values())}


def image_id(ref: str) -> str:
    done = sh(["docker", "image", "inspect", "--format", "{{.Id}}", ref])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def real_size(args: argparse.Namespace, locks: dict[str, Path], work: Path, lines: list[str]) -> None:
    """Each path in turn (not interleaved: two real-size bases do not fit the shared disk at once), from an empty
    BuildKit cache; each bump from the base alone (the layer cache as a node that built only the base has it), its
    image removed after measuring; with --cycle, both variants built and smoke-tested on each bump whose vllm and
    flashinfer-python are the project's; the path's images and layer cache removed before the next path. The
    single-layer base is removed once measured (without --push): its bumps build from nothing, and two 19 GB
    single-layer images plus a 9 GB build context do not fit the shared disk."""
    cache, log = args.cache or work / "cache", work / "build.log"
    srcs = {"layered": ROOT / "src", "single": args.old_src}
    ours = blocks((ROOT / LOCK_PATH).read_text())
    patched = ("vllm", "flashinfer-python")  # the packages the patches are for: a base with others is refused
    for path in args.paths:
        sh(["docker", "builder", "prune", "-af"])
        base = build(srcs[path], locks["base"], cache, log)
        prune_contexts(path)
        base_layers = layers_of(base["id"])
        registry = Registry(work / f"registry-{path}") if args.push else None
        row = {**base, **diff([], base_layers)}
        if registry:
            row.update(registry.push(base["tag"], f"bench-bump:{path}-base"))
        lines.append(f"{path} base: " + json.dumps(row, sort_keys=True))
        print(lines[-1], flush=True)
        if path == "single" and not registry:  # its bumps build from nothing: the base's 19 GB only fill the disk
            sh(["docker", "rmi", base["tag"]])
        for bump in args.bumps:
            if path == "layered":
                forget_but_base(cache, base["tag"])
            got = build(srcs[path], locks[bump], cache, log)
            prune_contexts(path)
            got.update(diff(base_layers, layers_of(got["id"])))
            if registry:
                got.update(registry.push(got["tag"], f"bench-bump:{path}-{bump}"))
            pins = blocks(locks[bump].read_text())
            if args.cycle and all(pins[name] == ours[name] for name in patched):
                got.update(cycle(got["tag"], path))
                got["cycle_s"] = got["wall"] + got["cycle_variants_s"]
            elif args.cycle:
                got["cycle_skipped"] = "its vllm or flashinfer-python is not the project's (imgbuild refuses the drift)"
            lines.append(f"{path} {bump}: " + json.dumps(got, sort_keys=True))
            print(lines[-1], flush=True)
            sh(["docker", "rmi", got["tag"]])
        if registry:
            registry.proc.stop()
            shutil.rmtree(registry.dir, ignore_errors=True)
        sh(["docker", "rmi", base["tag"]])
        shutil.rmtree(cache / "runtime", ignore_errors=True)  # both paths keep their layers and staging there


def forget_but_base(cache: Path, base_tag: str) -> None:
    """The layer cache as a node that built only the base has it: every other manifest, blob and key removed, so
    that a bump writes its changed layers (an earlier bump's run would have left them there)."""
    sys.path.insert(0, str(ROOT / "src"))
    from imgbuild.builder import runtime_base as rb

    root = rb.layout_dir(cache)
    index = json.loads((root / "index.json").read_text())
    kept = [m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == base_tag]
    assert kept, f"the layout has no manifest for {base_tag}"
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": kept}))
    rb._Layout(root)._collect({m["digest"] for m in kept})


BLOB_GET = re.compile(r'"GET \S+/blobs/(?P<digest>sha256:[0-9a-f]{64}) HTTP/[0-9.]+" (?P<status>\d{3}) (?P<bytes>\d+)')


class NodePull:
    """A node (a second dockerd) pulling from a loopback registry; `pull` returns what the registry sent it."""

    def __init__(self, stack: contextlib.ExitStack, work: Path) -> None:
        sys.path.insert(0, str(ROOT))
        from tests.support.node_daemon import node_daemon

        self.registry = Registry(work / "registry")
        stack.callback(self.registry.proc.stop)
        node = stack.enter_context(
            node_daemon(work / "node", "br-imgb-bump", containerd_store=True, address="10.214.81.1/24")
        )
        self.docker = ["docker", "-H", node.socket]

    def publish(self, image: str, name: str) -> dict[str, float]:
        return self.registry.push(image, name)

    def pull(self, name: str, keep: bool) -> dict[str, float]:
        ref = f"{self.registry.proc.host}/{name}"
        mark, t0 = self.registry.proc.log_mark(), time.monotonic()
        done = sh([*self.docker, "pull", "-q", ref])
        took = time.monotonic() - t0
        assert done.returncode == 0, done.stderr[-2000:]
        with (self.registry.dir / "registry.log").open("rb") as fh:
            fh.seek(mark)
            gets = [m for m in BLOB_GET.finditer(fh.read().decode(errors="replace")) if m["status"] == "200"]
        if not keep:
            assert sh([*self.docker, "rmi", ref]).returncode == 0
        return {"node_pull_s": took, "node_pulled_bytes": sum(int(m["bytes"]) for m in gets),
                "node_pulled_blobs": len(gets)}  # fmt: skip


def interleaved(args: argparse.Namespace, locks: dict[str, Path], work: Path, lines: list[str]) -> None:
    with contextlib.ExitStack() as stack:
        node = NodePull(stack, work) if args.node else None
        interleaved_rounds(args, locks, work, lines, node)


def interleaved_rounds(
    args: argparse.Namespace, locks: dict[str, Path], work: Path, lines: list[str], node: NodePull | None
) -> None:
    cache, log = args.cache or work / "cache", work / "build.log"
    srcs = {"layered": ROOT / "src", "single": args.old_src}
    bases, bases_tag = {}, {}
    for path in args.paths:
        got = build(srcs[path], locks["base"], cache, log)
        if not got["built"]:  # left by an earlier run: built again, so that it is timed and in the layer cache
            sh(["docker", "rmi", got["tag"]])
            got = build(srcs[path], locks["base"], cache, log)
        bases_tag[path] = got["tag"]
        bases[path] = layers_of(got["id"])
        if node:
            got.update(node.publish(got["tag"], f"bench-bump:{path}-base"))
            got.update(node.pull(f"bench-bump:{path}-base", keep=True))
        lines.append(f"{path} base: " + json.dumps({**got, **diff([], bases[path])}, sort_keys=True))
        print(lines[-1], flush=True)
    for rnd in range(args.rounds):
        for bump in args.bumps:
            for path in args.paths if rnd % 2 == 0 else list(reversed(args.paths)):
                if path == "layered":
                    forget_but_base(cache, bases_tag["layered"])
                got = build(srcs[path], locks[bump], cache, log)
                got.update(diff(bases[path], layers_of(got["id"])))
                save = subprocess.run(f"docker save {got['tag']} | wc -c", shell=True, text=True,
                                      capture_output=True, check=False)  # fmt: skip
                got["docker_save_bytes"] = int(save.stdout.strip() or 0)
                if node:
                    got.update(node.publish(got["tag"], f"bench-bump:{path}-{bump}"))
                    got.update(node.pull(f"bench-bump:{path}-{bump}", keep=False))
                sh(["docker", "rmi", got["tag"]])
                lines.append(f"{path} {bump} round {rnd}: " + json.dumps(got, sort_keys=True))
                print(lines[-1], flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paths", nargs="+", default=["layered", "single"])
    ap.add_argument("--bumps", nargs="+", default=["release", "vllm", "torch"])
    ap.add_argument("--old-src", type=Path, default=Path("/tmp/before/src"))
    ap.add_argument("--cache", type=Path, default=None, help="IMGBUILD_CACHE of both sides (default: a temp one)")
    ap.add_argument("--push", action="store_true", help="push to a loopback registry and count (real size)")
    ap.add_argument("--analyze", action="store_true", help="layer identity by key only: no docker")
    ap.add_argument("--subset-mb", type=int, default=0, help="drop dists larger than this (vllm, flashinfer kept)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (--subset-mb)")
    ap.add_argument("--node", action="store_true", help="a node dockerd pulls each bump (--subset-mb)")
    ap.add_argument("--cycle", action="store_true", help="both variants built and smoke-tested per bump (real size)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "issue34-bump.txt")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-bump-"))
    lines: list[str] = []
    try:
        locks = make_locks(work)
        if args.check:
            for name, path in locks.items():
                print(name, len(blocks(path.read_text())), "pins")
            return 0
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        when = time.strftime("%F %T UTC", time.gmtime())
        lines += [f"# issue 34 bump benchmark: {' '.join(sys.argv)}",
                  f"# machine: {platform.node()}, {os.cpu_count()} cores, load {load}, {when}"]  # fmt: skip
        for name in ["base", *args.bumps]:  # every wheel in uv's cache before anything is timed
            install(locks[name], work / "warm")
            shutil.rmtree(work / "warm")
        if args.analyze:
            analyze(locks, args.bumps, work, lines)
        elif args.subset_mb:
            keep = ("vllm", "flashinfer-python", *(["torch"] if "torch" in args.bumps else []))
            locks = subset_locks(locks, work, args.subset_mb, keep)
            lines.append(f"# subset: dists over {args.subset_mb} MiB installed left out ({', '.join(keep)} kept)")
            interleaved(args, locks, work, lines)
        else:
            real_size(args, locks, work, lines)
    except BaseException as exc:  # what was measured before the failure is kept, with the failure said
        lines.append(f"# FAILED here: {type(exc).__name__}: {str(exc)[-300:]}; the work dir {work} is kept")
        print(f"failed: the work dir {work} is kept (build.log)", file=sys.stderr)
        raise
    finally:
        if lines:
            with args.out.open("a") as fh:
                fh.write("\n".join(lines) + "\n")
            print(f"results: {args.out}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
