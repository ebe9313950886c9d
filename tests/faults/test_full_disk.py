"""The disk fills: the cache during the mirror's first fetch, the project during `patches rebase`, the destination
of `patches apply --into`, the runtime base's cache while `skeleton --runtime` installs its locked wheels. Each run
at several fill levels either completes or stops with "No space left on device" and no traceback; nothing is left
that a later run takes for good (a half mirror, a half-written patches/ or tree, a half layer blob, a tag); once
space is freed, the rerun gives what a run on a roomy disk gives.

The disk is a real tmpfs (root, as .ci/run runs), filled by a file that leaves SLACK bytes free.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from imgbuild.builder import runtime_base as rb
from imgbuild.builder.skeleton import RootfsRecipe, ensure_rootfs
from imgbuild.cache import cache_dir
from imgbuild.digests import sha256_file
from imgbuild.engine import Engine
from imgbuild.platforms import Platform
from imgbuild.project import Project
from imgbuild.workflows.workspace import state_dir
from tests.support.jsonschema_check import load_json
from tests.support.rebase_world import build_upstream, project, snapshot
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project
from tests.support.tmpfs import tmpfs
from tests.support.wheels import wheel

pytestmark = pytest.mark.faults

ENV = {"SOURCE_DATE_EPOCH": "1767225600", "COLUMNS": "200"}
SLACKS = (0, 16 << 10, 64 << 10, 160 << 10, 320 << 10)  # bytes left free: from none to most of what is needed
NAMES = ["0001-cuda-sm121.patch", "0003-config.patch"]


def run(root: Path, cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(root), *args],
        capture_output=True, text=True, timeout=600, env={**os.environ, **ENV, "IMGBUILD_CACHE": str(cache), **env},
    )  # fmt: skip


def fill(disk: Path, slack: int) -> Path:
    """A file taking all of `disk` but `slack` bytes."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    size = max(0, st.f_bavail * st.f_frsize - slack)
    with filler.open("wb") as fh:
        fh.truncate(0)
        chunk = b"\0" * (1 << 20)
        while size > 0:
            size -= fh.write(chunk[: min(len(chunk), size)])
    return filler


def said_full(done: subprocess.CompletedProcess[str]) -> bool:
    """It stopped, saying the disk is full, without a traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode != 0 and "No space left on device" in done.stderr


@pytest.fixture
def world(upstream: Upstream) -> Upstream:
    return build_upstream(upstream)


def test_the_cache_fills_during_the_mirrors_first_fetch(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, NAMES, tag="v1")
    good = run(root, tmp_path / "roomy", "patches", "check", "--json")
    assert good.returncode == 0, good.stderr
    outcomes = []
    for slack in SLACKS:
        with tmpfs(tmp_path / f"cache-{slack}", "size=2m") as cache:
            filler = fill(cache, slack)
            full = run(root, cache, "patches", "check", "--json")
            stopped = said_full(full)
            assert stopped or full.returncode == 0, (slack, full.stderr)
            outcomes.append("full" if stopped else "done")
            filler.unlink()  # space freed: the rerun finishes the cache and agrees with the roomy run
            again = run(root, cache, "patches", "check", "--json")
            assert again.returncode == 0, (slack, again.stderr)
            assert json.loads(again.stdout) == json.loads(good.stdout), slack
    assert outcomes[0] == "full", outcomes  # nothing free: it stopped, and said why


def test_the_project_fills_during_patches_rebase(tmp_path: Path, world: Upstream) -> None:
    cache = tmp_path / "cache"
    start = project(tmp_path / "start", world, NAMES, tag="v1")
    assert run(start, cache, "patches", "check").returncode == 0  # the mirror is fetched: the rebase is the work
    before = snapshot(start)
    roomy = shutil.copytree(start, tmp_path / "roomy")
    done = run(roomy, cache, "patches", "rebase", "--onto", "v2")
    assert done.returncode == 0, done.stderr
    after = snapshot(roomy)
    outcomes = []
    for slack in SLACKS:
        with tmpfs(tmp_path / f"disk-{slack}", "size=2m") as disk:
            root = shutil.copytree(start, disk / "p")
            filler = fill(disk, slack)
            full = run(root, cache, "patches", "rebase", "--onto", "v2")
            stopped = said_full(full)
            assert stopped or full.returncode == 0, (slack, full.stderr)
            now = snapshot(root)
            in_progress = state_dir(root, "rebase").is_dir()
            assert in_progress or now in (before, after), slack  # no half-written patches/
            outcomes.append(("full" if stopped else "done", in_progress))
            filler.unlink()
            if in_progress:  # the rebase began: the next command says to resume it, and --continue finishes it
                said = run(root, cache, "patches", "rebase", "--onto", "v2")
                assert said.returncode != 0 and "--continue" in said.stderr, said.stderr
                again = run(root, cache, "patches", "rebase", "--continue")
            elif now == before:
                again = run(root, cache, "patches", "rebase", "--onto", "v2")
            else:
                again = full
            assert again.returncode == 0, (slack, again.stderr)
            assert snapshot(root) == after and not state_dir(root, "rebase").is_dir(), slack
    print(f"rebase on a full disk: {outcomes}")
    assert outcomes[0][0] == "full", outcomes


def tree_of(root: Path) -> dict[str, str]:
    """Every file under `root` (relative path -> sha256)."""
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def used(path: Path) -> int:
    """Bytes `path` takes on its disk (what `du` counts: whole pages)."""
    return sum(p.lstat().st_blocks * 512 for p in [path, *path.rglob("*")])


def test_the_destination_fills_during_patches_apply_into(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, NAMES, tag="v1")
    cache = tmp_path / "cache"
    with tmpfs(tmp_path / "roomy", "size=2m") as roomy:  # measured on a tmpfs too: what the tree takes there
        good = run(root, cache, "patches", "apply", "--into", str(roomy / "out"))
        assert good.returncode == 0, good.stderr
        want, need = tree_of(roomy / "out"), used(roomy / "out")
    outcomes = []
    for slack in (0, need // 4, need // 2, need - 4096, 2 * need + (64 << 10)):
        with tmpfs(tmp_path / f"disk-{slack}", "size=2m") as disk:
            dest = disk / "out"
            filler = fill(disk, slack)
            assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # before: nothing but the filler
            full = run(root, cache, "patches", "apply", "--into", str(dest))
            stopped = said_full(full)
            assert stopped or full.returncode == 0, (slack, full.stderr)
            outcomes.append("full" if stopped else "done")
            if stopped:  # which step, what to do; and no staging, no lock, no half tree beside the filler
                assert full.returncode == 10 and "free some space" in full.stderr, full.stderr
                assert sorted(p.name for p in disk.iterdir()) == ["filler"], (slack, list(disk.iterdir()))
            else:
                assert tree_of(dest) == want, slack
            filler.unlink()  # space freed: the rerun writes the whole tree, the same as on a roomy disk
            again = full if not stopped else run(root, cache, "patches", "apply", "--into", str(dest))
            assert again.returncode == 0, (slack, again.stderr)
            assert tree_of(dest) == want and sorted(p.name for p in disk.iterdir()) == ["out"], slack
    print(f"apply --into on a full disk ({need} bytes needed): {outcomes}")
    assert outcomes[:4] == ["full"] * 4 and outcomes[4] == "done", outcomes


# -- skeleton --runtime: the runtime base's cache fills while the locked wheels are installed ----------------
HOST = Platform.host()
FILLERS = ("filla", "fillb", "fillc")


@pytest.fixture(scope="module")
def runtime_rootfs() -> Path:
    """The runtime base's rootfs for this machine, in the user cache (mmdebstrap, once, as the skeleton's)."""
    return ensure_rootfs(RootfsRecipe(HOST.arch, include=rb.INCLUDE), cache_dir())


@dataclass(frozen=True)
class SmallLock:
    """A project whose runtime lock is four small wheels (uv, offline, on a find-links folder): installed, they
    are about a megabyte, so a small disk fills during the install; the rootfs is the real one."""

    root: Path
    env: dict[str, str]
    rootfs: Path
    tree_bytes: int  # what the installed tree takes on a disk

    def cache(self, path: Path) -> Path:
        """A cache at `path` holding the rootfs already (a hard link to the user cache's), as a second run has it."""
        skeleton = path / "skeleton"
        skeleton.mkdir(parents=True, exist_ok=True)
        (skeleton / self.rootfs.name).hardlink_to(self.rootfs)
        return path


@pytest.fixture
def small_lock(
    tmp_path: Path, synth_upstream: Upstream, runtime_rootfs: Path, monkeypatch: pytest.MonkeyPatch
) -> SmallLock:
    links = tmp_path / "links"
    links.mkdir()
    root = engram_project(tmp_path / "project", synth_upstream, "unused")
    version = Project.load(root).pin.version  # the lock must hold the pinned release
    wheel(links, "vllm", list(FILLERS), version=version, payload=os.urandom(64 << 10))
    for name in FILLERS:  # random: incompressible, and a lock (so a tag) of this test's own
        wheel(links, name, [], payload=os.urandom(256 << 10))
    env = {"UV_OFFLINE": "1", "UV_FIND_LINKS": str(links), "UV_CACHE_DIR": str(tmp_path / "uv")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    lock = rb.relock(root, HOST, version)
    (tmp_path / "measure").mkdir()
    rb.install_tree(lock, tmp_path / "measure" / "tree")
    return SmallLock(root, env, runtime_rootfs, used(tmp_path / "measure" / "tree"))


def runtime_intact(runtime: Path) -> None:
    """Nothing half-written that a later run would use: no install staging, every layer blob whole (its name is
    its sha256), every key naming a whole blob, no temp file of a write the disk stopped."""
    assert not list(runtime.glob(".staging-*")) and not list(runtime.glob(".context-*")), list(runtime.iterdir())
    layout = runtime / "layers"
    if not layout.is_dir():
        return
    assert [p.name for p in layout.rglob(".*")] == [], list(layout.rglob(".*"))
    for blob in (layout / "blobs" / "sha256").iterdir():
        assert sha256_file(blob) == blob.name, blob
    for key in (layout / "keys").iterdir():
        digest, size = key.read_text().split()
        assert (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).stat().st_size == int(size), key


def test_the_cache_fills_during_skeleton_runtime(tmp_path: Path, small_lock: SmallLock, engine: Engine) -> None:
    args = ("skeleton", "--runtime", "--platform", str(HOST), "--json")
    good = run(small_lock.root, small_lock.cache(tmp_path / "roomy"), *args, **small_lock.env)
    assert good.returncode == 0, good.stderr[-3000:]
    made = load_json(good.stdout)
    tag, image_id = str(made["tag"]), str(made["image_id"])
    layers_bytes = used(tmp_path / "roomy" / "runtime" / "layers")
    tree = small_lock.tree_bytes
    size = (tree + layers_bytes + (16 << 20)) >> 20
    slacks = (0, tree // 4, tree // 2, tree + layers_bytes // 2, tree + layers_bytes + (8 << 20))
    outcomes = []
    try:
        for slack in slacks:
            engine.untag(tag)
            assert engine.image(tag) is None  # before: no runtime base, an empty runtime cache
            cache = small_lock.cache(tmp_path / f"cache-{slack}")
            with tmpfs(cache / "runtime", f"size={size}m") as runtime:
                filler = fill(runtime, slack)
                assert [p.name for p in runtime.iterdir()] == ["filler"]  # before: nothing of a runtime base's
                full = run(small_lock.root, cache, *args, **small_lock.env)
                stopped = said_full(full)
                assert stopped or full.returncode == 0, (slack, full.stderr[-3000:])
                step = re.search(r"the runtime base stopped while (\w+)", full.stderr)
                outcomes.append(step.group(1) if step else "done")
                if stopped:  # the step and the directory to free; no tag, nothing half-written
                    assert full.returncode == 10 and step is not None, full.stderr
                    print(f"slack {slack}: {full.stderr.strip().splitlines()[-2:]}")
                    assert f"free some space on the disk of {runtime}" in full.stderr, full.stderr
                    assert engine.image(tag) is None, slack
                runtime_intact(runtime)
                filler.unlink()  # space freed: the rerun builds the same image as the roomy run
                again = full if not stopped else run(small_lock.root, cache, *args, **small_lock.env)
                assert again.returncode == 0, (slack, again.stderr[-3000:])
                assert load_json(again.stdout)["image_id"] == image_id and load_json(again.stdout)["built"], slack
                runtime_intact(runtime)
                third = run(small_lock.root, cache, *args, **small_lock.env)  # the base is there: nothing to do
                assert third.returncode == 0 and load_json(third.stdout)["built"] is False, third.stderr[-2000:]
    finally:
        engine.untag(tag)
    print(f"skeleton --runtime on a full disk (tree {tree} bytes, layers {layers_bytes}): {outcomes}")
    assert outcomes == ["installing"] * 3 + ["writing", "done"], outcomes
