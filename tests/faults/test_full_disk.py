"""The disk fills: the cache during the mirror's first fetch, the project during `patches rebase`. Each run at
several fill levels either completes or stops with "No space left on device" and no traceback; nothing is left
that a later run takes for good (a half mirror, a half-written patches/); once space is freed, the rerun gives
what a run on a roomy disk gives.

The disk is a real tmpfs (root, as .ci/run runs), filled by a file that leaves SLACK bytes free.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imgbuild.workflows.workspace import state_dir
from tests.support.rebase_world import build_upstream, project, snapshot
from tests.support.synth import Upstream
from tests.support.tmpfs import tmpfs

pytestmark = pytest.mark.faults

ENV = {"SOURCE_DATE_EPOCH": "1767225600", "COLUMNS": "200"}
SLACKS = (0, 16 << 10, 64 << 10, 160 << 10, 320 << 10)  # bytes left free: from none to most of what is needed
NAMES = ["0001-cuda-sm121.patch", "0003-config.patch"]


def run(root: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(root), *args],
        capture_output=True, text=True, timeout=300, env={**os.environ, **ENV, "IMGBUILD_CACHE": str(cache)},
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
