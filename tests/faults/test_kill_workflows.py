"""SIGKILL at many points of `patches bump` and `patches rebase --continue`: the project is left before or after
(patches/, the pin, the branch, the commit), or with the rebase in progress, which the next command names; and
following what the commands say converges to what a run without the kill gives, byte for byte.

The points are a sweep over the command's own duration (measured on a run without the kill), not hooks in the
product: every kill lands wherever the process is at that moment (the mirror's first fetch, the rebase, the
write-back of patches/, the commit). Real git on tests/support/rebase_world.py; nothing is built (--no-build).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from imgbuild.workflows.workspace import state_dir
from tests.support.rebase_world import build_upstream, project
from tests.support.synth import Upstream, git

pytestmark = pytest.mark.faults

POINTS = 5  # kills per command, spread over its duration
ENV = {"SOURCE_DATE_EPOCH": "1767225600", "COLUMNS": "200"}  # Last-Update is the same in every run


@dataclass(frozen=True)
class State:
    branch: str
    head_patches: str  # the tree id of patches/ at HEAD
    work_patches: str  # a digest of patches/ in the work tree
    dirty: bool
    rebasing: bool

    @classmethod
    def of(cls, root: Path) -> State:
        files = sorted(p for p in (root / "patches").rglob("*") if p.is_file())
        digest = hashlib.sha256()
        for p in files:
            digest.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
        return cls(
            git(root, "symbolic-ref", "--short", "HEAD").strip(),
            git(root, "rev-parse", "HEAD:patches").strip(),
            digest.hexdigest(),
            bool(git(root, "status", "--porcelain", "--", "patches").strip()),
            state_dir(root, "rebase").is_dir(),
        )


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(root), *args],
        capture_output=True, text=True, env={**os.environ, **ENV}, timeout=300,
    )  # fmt: skip


def killed(root: Path, args: tuple[str, ...], after: float) -> bool:
    """Start the command, SIGKILL it `after` seconds in; whether it was still running then."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "imgbuild", "-C", str(root), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **ENV},
    )  # fmt: skip
    time.sleep(after)
    running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return running


def killed_when(root: Path, args: tuple[str, ...], event: Callable[[Path], bool]) -> bool:
    """Start the command, SIGKILL it as soon as `event(root)` holds (polled every half millisecond); whether it
    was killed there (False: it ended before the event was seen)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "imgbuild", "-C", str(root), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **ENV},
    )  # fmt: skip
    while proc.poll() is None:
        try:
            hit = event(root)
        except OSError:
            hit = False
        if hit:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            return True
        time.sleep(0.0005)
    return False


def head_moved(start: str) -> Callable[[Path], bool]:
    def moved(root: Path) -> bool:
        ref = root / ".git" / "refs" / "heads" / "imgbuild" / "bump-v3"
        return ref.is_file() and ref.read_text().strip() not in ("", start)

    return moved


def pin_changed(start: bytes) -> Callable[[Path], bool]:
    return lambda root: (root / "patches" / "upstream.yaml").read_bytes() != start


def checkout(root: Path, world: Upstream, names: list[str], tag: str) -> Path:
    project(root, world, names, tag=tag)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("/.imgbuild-work/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the project")
    return root


def converge(root: Path) -> list[str]:
    """Do what the commands say until the bump is committed; the commands run."""
    done = []
    for _ in range(5):
        bump = run(root, "patches", "bump", "--no-build")
        done.append(f"bump: {bump.returncode}")
        if bump.returncode == 0:
            return done
        said = bump.stderr
        assert "Traceback" not in said, said
        if "rebase --continue" in said:
            cont = run(root, "patches", "rebase", "--continue")
            done.append(f"rebase --continue: {cont.returncode}")
            assert cont.returncode == 0, cont.stderr
            continue
        raise AssertionError(f"bump after a kill says neither done nor what to do: {said}")
    raise AssertionError(f"no convergence: {done}")


def sweep(
    tmp_path: Path,
    start: Path,
    args: tuple[str, ...],
    before: State,
    after: State,
    finish: Callable[[Path], None],
    events: dict[str, Callable[[Path], bool]],
) -> set[str]:
    """Kill `args` in a copy of `start` each: at POINTS moments spread over its duration, and as soon as each of
    `events` is seen; check the state then, converge, compare. The events the kill landed on."""
    reference = shutil.copytree(start, tmp_path / "timing", symlinks=True)
    t0 = time.monotonic()
    assert run(reference, *args).returncode in (0, 5)
    took = time.monotonic() - t0
    landed = set()
    kills: list[tuple[str, Callable[[Path], object]]] = [
        *(
            (f"at {i}/{POINTS + 1}", lambda root, i=i: killed(root, args, took * i / (POINTS + 1)))
            for i in range(1, POINTS + 1)
        ),
        *((name, lambda root, e=e: killed_when(root, args, e)) for name, e in events.items()),
    ]
    for i, (name, kill) in enumerate(kills):
        root = shutil.copytree(start, tmp_path / f"kill-{i}", symlinks=True)
        if kill(root) is True:
            landed.add(name)
        now = State.of(root)
        assert now.branch in (before.branch, after.branch), now
        assert now.head_patches in (before.head_patches, after.head_patches), now  # no commit is half of one
        if not now.rebasing:  # nothing in progress (its journal is in the rebase's state): before or after
            assert now.work_patches in (before.work_patches, after.work_patches), (name, now)
        finish(root)
        final = State.of(root)
        assert final == after, (name, now, final)
    return landed


@pytest.fixture
def world(upstream: Upstream) -> Upstream:
    return build_upstream(upstream)


def test_bump_killed_anywhere_is_before_or_after_and_converges(tmp_path: Path, world: Upstream) -> None:
    names = ["0002-arch-sm121.patch", "0003-config.patch", "0004-engram-disk.patch", "0007-flash-backend.patch"]
    start = checkout(tmp_path / "start", world, names, "v1")
    before = State.of(start)
    clean = shutil.copytree(start, tmp_path / "clean", symlinks=True)
    done = run(clean, "patches", "bump", "--no-build")
    assert done.returncode == 0, done.stderr
    after = State.of(clean)
    assert after.branch == "imgbuild/bump-v3" and not after.dirty and after.head_patches != before.head_patches
    head = git(start, "rev-parse", "HEAD").strip()
    events = {
        "the branch made": lambda root: (root / ".git" / "refs" / "heads" / "imgbuild" / "bump-v3").is_file(),
        "the rebase begun": lambda root: state_dir(root, "rebase").is_dir(),
        "patches/ being written": lambda root: (state_dir(root, "rebase") / "txn").exists(),
        "the pin written": pin_changed((start / "patches" / "upstream.yaml").read_bytes()),
        "the commit made": head_moved(head),
    }
    landed = sweep(tmp_path, start, ("patches", "bump", "--no-build"), before, after, converge, events)
    print(f"bump killed at: {sorted(landed)}")
    assert {"the branch made", "the rebase begun"} <= landed, landed


def test_rebase_continue_killed_anywhere_resumes_and_converges(tmp_path: Path, world: Upstream) -> None:
    start = checkout(tmp_path / "start", world, ["0001-cuda-sm121.patch", "0003-config.patch"], "v2")
    stopped = run(start, "patches", "bump", "--no-build")
    assert stopped.returncode == 5, stopped.stderr  # the conflict
    cuda = state_dir(start, "rebase") / "tree" / "vllm/platforms/cuda.py"
    cuda.write_text(cuda.read_text().replace("cuda 20 sm121\n", "").replace(
        "<<<<<<< upstream v3\ncuda 20 upstream style\n=======\n>>>>>>> 0001-cuda-sm121.patch\n",
        "cuda 20 upstream style sm121\n",
    ))  # fmt: skip
    before = State.of(start)
    clean = shutil.copytree(start, tmp_path / "clean", symlinks=True)
    cont = run(clean, "patches", "rebase", "--continue")
    assert cont.returncode == 0, cont.stderr
    converge(clean)
    after = State.of(clean)
    assert after.branch == "imgbuild/bump-v3" and not after.dirty and not after.rebasing

    def finish(root: Path) -> None:
        if state_dir(root, "rebase").is_dir():
            again = run(root, "patches", "rebase", "--continue")
            assert again.returncode == 0, again.stderr
        converge(root)

    events = {
        "patches/ being written": lambda root: (state_dir(root, "rebase") / "txn").exists(),
        "the pin written": pin_changed((start / "patches" / "upstream.yaml").read_bytes()),
        "the rebase's state removed": lambda root: not state_dir(root, "rebase").is_dir(),
    }
    landed = sweep(tmp_path, start, ("patches", "rebase", "--continue"), before, after, finish, events)
    print(f"rebase --continue killed at: {sorted(landed)}")
    assert {"at 1/6", "at 3/6"} <= landed, landed
