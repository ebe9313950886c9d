"""Fixtures for the docker tier: a real engine, a skeleton base, synthetic projects.

The skeleton base is built once per session (its rootfs tar is cached in the
user cache, so only the first session ever pays the ~1 minute mmdebstrap).
Every image a test makes lives in a repository named after the session and
is removed at the end, together with the dangling images the failure tests
leave behind.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imgbuild.builder import skeleton
from imgbuild.cache import cache_dir
from imgbuild.engine import Engine
from imgbuild.platforms import Platform
from imgbuild.upstream.git import GitRepo
from tests.support.cleanup import drop_large
from tests.support.runner import imgbuild
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine.connect()


@pytest.fixture(scope="session")
def synth_upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    up = Upstream(tmp_path_factory.mktemp("synth") / "upstream")
    release(up)
    return up


@pytest.fixture(scope="session")
def skeleton_base(engine: Engine, synth_upstream: Upstream) -> str:
    """The skeleton for the synthetic release (commit ids are fixed, so the tag is stable across sessions)."""
    commit = GitRepo(synth_upstream.path).resolve_commit("v1.0.0")
    assert commit is not None
    spec = skeleton.SkeletonSpec(Platform.parse("linux/arm64"), commit)
    skeleton.ensure_skeleton(engine, spec, [GitRepo(synth_upstream.path)], cache_dir())
    return spec.tag


@pytest.fixture(scope="session")
def prefix(engine: Engine, synth_upstream: Upstream) -> Iterator[str]:
    name = f"imgbuild-test-{secrets.token_hex(4)}"
    yield name
    cleanup(engine, name, synth_upstream.url)


def cleanup(engine: Engine, prefix: str, upstream_url: str) -> None:
    """Remove this session's tags by name, then its untagged images.

    By name, not by id: builds are reproducible, so another session (another
    engineer's run on the same daemon) can hold an image of the same digest
    under its own prefix, and `rmi -f <id>` would take its names too.
    """
    for _ in range(6):
        # one listing, not the SDK's `images.list()`, which inspects each image it listed: one that another session
        # on this daemon removed in between failed the whole teardown with 404 "No such image"
        rows = engine.client.api.images()
        named = {str(r["Id"]): [t for t in r.get("RepoTags") or [] if t != "<none>:<none>"] for r in rows}
        tags = [t for names in named.values() for t in names if t.startswith(prefix)]
        dangling = {
            str(r["Id"])
            for r in rows
            if not named[str(r["Id"])] and (r.get("Labels") or {}).get("imgbuild.upstream.url") == upstream_url
        }
        if not tags and not dangling:
            return
        for ref in tags:
            with contextlib.suppress(Exception):  # a child may still hold it; the next pass gets it
                engine.client.api.remove_image(ref)
        for image_id in dangling:
            with contextlib.suppress(Exception):
                engine.client.api.remove_image(image_id, force=True)


run_cli = imgbuild  # `imgbuild -C PROJECT ARGS...` (tests/support/runner.py), the name this tier's tests import


@dataclass(frozen=True)
class Built:
    project: Path
    repo: str
    cache: Path
    stdout: str
    stderr: str

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli(self.project, *args, env={"IMGBUILD_CACHE": str(self.cache), **(env or {})})


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
    synth_upstream: Upstream,
    prefix: str,
    skeleton_base: str,  # noqa: ARG001 - the skeleton image must exist before `--base skeleton` builds
) -> Iterator[Built]:
    """One project with both variants built on the skeleton, shared by a module's tests."""
    root = tmp_path_factory.mktemp("built")
    repo = f"{prefix}-{root.name}"
    project = engram_project(root / "project", synth_upstream, repo)
    cache = root / "cache"
    proc = run_cli(project, "build", "latest", "engram-mem", "--base", "skeleton", env={"IMGBUILD_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    yield Built(project, repo, cache, proc.stdout, proc.stderr)
    drop_large(cache)  # its OCI layout is ~180 MB; pytest keeps three runs of every module's


MakeProject = Callable[..., Path]


@pytest.fixture
def make_project(
    tmp_path: Path,
    synth_upstream: Upstream,
    prefix: str,
    skeleton_base: str,  # noqa: ARG001 - the skeleton image must exist before its projects build
) -> MakeProject:
    """A synthetic engram-shaped project whose images go to `<prefix>-<name>`."""

    def make(name: str, **kw: object) -> Path:
        return engram_project(tmp_path / name, synth_upstream, f"{prefix}-{name}", **kw)

    return make
