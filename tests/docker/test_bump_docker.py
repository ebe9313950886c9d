"""`imgbuild patches bump` all the way: a new release carried on a branch, both variants built on the skeleton
stand-in and smoke-tested, the image ids in the review report (the fast tier, tests/git/test_bump.py, runs it
with --no-build)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from imgbuild.builder import skeleton
from imgbuild.cache import cache_dir
from imgbuild.engine import Engine
from imgbuild.platforms import Platform
from tests.docker.conftest import run_cli
from tests.support.synth import Upstream, git
from tests.support.synth_images import engram_project

pytestmark = pytest.mark.docker


def _user_cache() -> Path:
    """Where the session's skeleton fixture cached its rootfs (the user cache: no test's own)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild"


@pytest.fixture
def newer(tmp_path: Path, synth_upstream: Upstream, engine: Engine) -> Iterator[Upstream]:
    """A copy of the session's upstream with a release v1.0.1 that touches no patched file; its skeleton
    is removed afterwards."""
    up = Upstream.at(Path(shutil.copytree(synth_upstream.path, tmp_path / "upstream")))
    commit = up.release("v1.0.1", {"vllm/__init__.py": "__version__ = '1.0.1'\n", "vllm/new_in_101.py": "X = 1\n"})
    yield up
    for img in engine.client.images.list(filters={"label": f"imgbuild.upstream.commit={commit}"}):
        for tag in img.tags:
            with contextlib.suppress(Exception):
                engine.client.api.remove_image(tag)


def test_a_clean_bump_builds_and_smoke_tests_both_variants(
    tmp_path: Path,
    newer: Upstream,
    prefix: str,
    skeleton_base: str,  # noqa: ARG001 - the arm64 rootfs is cached once the session's skeleton exists
    engine: Engine,
) -> None:
    repo = f"{prefix}-bump"
    root = engram_project(tmp_path / "project", newer, repo)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("/.imgbuild-work/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the project")
    # the rootfs tar the session already made, linked into this test's cache (no second mmdebstrap)
    recipe = skeleton.SkeletonSpec(Platform.parse("linux/arm64"), "0" * 40).rootfs
    made = skeleton.rootfs_path(recipe, _user_cache())
    if made.is_file():
        mine = skeleton.rootfs_path(recipe, cache_dir())
        mine.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.link(made, mine)
    proc = run_cli(root, "patches", "bump", "--base", "skeleton", "--json", "--report-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    doc = json.loads(proc.stdout)
    assert doc["status"] == "carried" and doc["built"] is True and doc["branch"] == "imgbuild/bump-v1.0.1"
    assert {p["kind"] for p in doc["patches"]} == {"carried"}
    images = {i["variant"]: i for i in doc["images"]}
    assert set(images) == {"latest", "engram-mem"}
    for variant, image in images.items():
        assert image["smoke"] == "passed", variant
        info = engine.require(image["immutable"])
        assert info.id == image["image_id"] and info.labels["imgbuild.variant"] == variant
        assert info.labels["imgbuild.upstream.commit"] == git(newer.path, "rev-parse", "v1.0.1").strip()
    assert "built and smoke-tested 2 image(s)" in doc["message"]
    md = Path(doc["report"]["markdown"]).read_text()
    assert "## Images (built and smoke-tested)" in md
    assert all(i["image_id"] in md for i in images.values())
    data = json.loads(Path(doc["report"]["json"]).read_text())
    assert data["bump"]["images"] == doc["images"] and data["bump"]["commit"] == git(root, "rev-parse", "HEAD").strip()
