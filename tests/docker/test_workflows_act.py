"""Every job of every workflow in .github/workflows/, run under act on this machine (tests/support/act_run.py).

ci.yml runs on a snapshot of this work tree on a pull request. images.yml, patches-check.yml and
patches-bump.yml run on a "world": this work tree's imgbuild with a synthetic project (a local git upstream,
two variants) whose base is the skeleton stand-in pushed to a loopback docker-registry, locked and baked,
so that images.yml's whole graph (plan, per-platform builds, smoke, join, tag moves) fits in minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from imgbuild.registry import tools
from tests.support.act_run import ROOT, Site, git, jobs_succeeded, snapshot, tail, uses_of
from tests.support.registry_env import RegistryProcess, docker, push_skeleton_bases, remove_images, set_platforms
from tests.support.runner import imgbuild
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release

pytestmark = pytest.mark.docker
WORKFLOWS = ROOT / ".github" / "workflows"
# what every workflow is run on below; a workflow added without a run here fails the first test
RUNS = {
    "ci.yml": {"pull_request"},
    "images.yml": {"push", "workflow_dispatch"},
    "patches-check.yml": {"schedule", "workflow_dispatch"},
    "patches-bump.yml": {"schedule", "workflow_dispatch"},
    "lock.yml": {"schedule", "workflow_dispatch"},
}


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild"


def triggers(path: Path) -> set[str]:
    data = yaml.safe_load(path.read_text())
    return set(data[True] if True in data else data["on"])


def test_every_workflow_and_its_events_are_run_here() -> None:
    found = {p.name: triggers(p) for p in sorted(WORKFLOWS.glob("*.yml"))}
    assert set(found) == set(RUNS)
    for name, events in found.items():
        # a workflow's events that the runs below leave out: push for ci.yml (the same jobs as pull_request)
        assert RUNS[name] <= events, name
        assert events - RUNS[name] <= ({"push"} if name == "ci.yml" else set()), name
        uses_of(WORKFLOWS / name)  # no services:, container: or reusable workflow that act would skip


def test_ci_workflow_on_a_pull_request(tmp_path: Path) -> None:
    site = Site(tmp_path)
    tree = tmp_path / "tree"
    snapshot(ROOT, tree)
    sha = site.push(tree, "the work tree")
    pr = {"number": 1, "head": {"ref": "topic", "sha": sha}, "base": {"ref": "main"}}
    done = site.act(
        "ci.yml",
        "pull_request",
        payload={"pull_request": pr},
        # full-tiers is .ci/run, the command this test runs inside: nested, it collects the tiers, runs none
        env={"IMGBUILD_ACT_NESTED": "1"},
    )
    assert done.returncode == 0, tail(done)
    assert jobs_succeeded(done) == ["ci/full-tiers", "ci/lint-and-fast-tests"], tail(done)
    assert "IMGBUILD_ACT_NESTED: collected" in done.stdout


@dataclass
class World:
    site: Site
    registry: RegistryProcess
    upstream: Upstream
    image_registry: str  # the workflows' IMAGE_REGISTRY (a repository variable on GitHub)
    repo: str
    project: Path  # the synthetic project the site's tree carries

    def act(self, workflow: str, event: str, **kw: object) -> object:
        variables = {"IMAGE_REGISTRY": self.image_registry, **kw.pop("variables", {})}  # type: ignore[dict-item]
        return self.site.act(workflow, event, variables=variables, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Iterator[World]:
    root = tmp_path_factory.mktemp("act-world")
    registry = RegistryProcess.start(root / "registry")
    repo = f"{prefix}-act"
    try:
        upstream = Upstream(root / "upstream")
        release(upstream)
        base = f"{registry.host}/vllm/vllm-openai:v1.0.0"
        project = engram_project(root / "project", upstream, repo, base=base)
        set_platforms(project, ["linux/arm64", "linux/amd64"])
        push_skeleton_bases(project, registry.host, "vllm/vllm-openai", "v1.0.0", user_cache())
        tree = root / "tree"
        snapshot(ROOT, tree, drop=["patches", "images", "images.lock", "buildkit/docker-bake.json", "tests"])
        shutil.copytree(project, tree, dirs_exist_ok=True)
        for step in (["lock"], ["bake"]):
            proc = imgbuild(tree, *step)
            assert proc.returncode == 0, proc.stderr
        shutil.rmtree(tree / "buildkit" / "context")
        site = Site(root / "site")
        site.push(tree, "imgbuild with a synthetic project, locked on the loopback registry's skeleton")
        yield World(site, registry, upstream, f"{registry.host}/acme", repo, project)
    finally:
        registry.stop()
        remove_images(registry.host + "/")


def test_images_workflow_builds_what_is_missing_then_nothing(world: World) -> None:
    first = world.act("images.yml", "push")
    assert first.returncode == 0, tail(first)  # type: ignore[attr-defined]
    ran = jobs_succeeded(first)  # type: ignore[arg-type]
    # one build per variant x platform (arm64 on the ubuntu-24.04-arm label), one merge per variant
    assert ran.count("images/plan") == 1 and len([j for j in ran if j.startswith("images/build")]) == 4, ran
    assert len([j for j in ran if j.startswith("images/merge")]) == 2, ran
    for variant in ("latest", "engram-mem"):
        index = tools.inspect_required(f"{world.image_registry}/{world.repo}:{variant}")
        assert index.is_index and {str(p) for p, _ in index.entries()} == {"linux/arm64", "linux/amd64"}
    second = world.act("images.yml", "push")
    assert second.returncode == 0, tail(second)  # type: ignore[attr-defined]
    assert jobs_succeeded(second) == ["images/plan"], tail(second)  # type: ignore[arg-type]
    assert "in the registry" in second.stdout  # type: ignore[attr-defined]


def test_images_workflow_dispatch_all_builds_arm64_under_qemu_without_arm_runners(world: World) -> None:
    done = world.act(
        "images.yml",
        "workflow_dispatch",
        inputs={"all": "true"},
        variables={"IMGBUILD_RUNNERS": json.dumps({"linux/amd64": "ubuntu-24.04"})},
    )
    assert done.returncode == 0, tail(done)  # type: ignore[attr-defined]
    assert "linux/arm64: qemu-aarch64 enabled" in done.stdout  # type: ignore[attr-defined]  # the QEMU leg


def test_patches_check_on_schedule_and_dispatch(world: World) -> None:
    done = world.act("patches-check.yml", "schedule", payload={"schedule": "23 5 * * *"})
    assert done.returncode == 0, tail(done)  # type: ignore[attr-defined]
    assert jobs_succeeded(done) == ["patches-check/check", "patches-check/pins"], tail(done)  # type: ignore[arg-type]
    done = world.act("patches-check.yml", "workflow_dispatch", inputs={"refs": "pinned"})
    assert done.returncode == 0, tail(done)  # type: ignore[attr-defined]
    out = done.stdout  # type: ignore[attr-defined]
    assert '"ref": "pinned"' in out and '"ref": "latest"' not in out  # the input's refs, not the default


def test_patches_bump_builds_and_opens_the_pull_request(world: World) -> None:
    world.upstream.release("v1.0.1", {"vllm/new_in_101.py": "X = 1\n"})
    # a release comes with its stock image, which the bump moves image.base to
    push_skeleton_bases(world.project, world.registry.host, "vllm/vllm-openai", "v1.0.1", user_cache())
    done = world.act(
        "patches-bump.yml", "schedule", payload={"schedule": "41 5 * * *"}, env={"IMGBUILD_BASE": "skeleton"}
    )
    assert done.returncode == 0, tail(done)  # type: ignore[attr-defined]
    calls = [c["argv"] for c in world.site.gh_calls()]
    assert ["auth", "setup-git"] in calls
    created = [c for c in calls if c[:2] == ["pr", "create"]]
    assert len(created) == 1 and "imgbuild/bump-v1.0.1" in created[0], calls
    log = git(world.site.origin, "log", "--format=%s", "imgbuild/bump-v1.0.1")
    assert log.splitlines()[0].startswith("images.lock, buildkit/docker-bake.json: follow v1.0.1"), log
    latest = git(world.site.origin, "show", "imgbuild/bump-v1.0.1:images/latest.yaml")
    assert "vllm/vllm-openai:v1.0.1" in latest, latest
    # by hand, one pin, the same release: its branch is on origin already, so nothing is pushed or opened
    again = world.act("patches-bump.yml", "workflow_dispatch", inputs={"onto": "v1.0.1", "pin": "vllm"})
    assert again.returncode == 0, tail(again)  # type: ignore[attr-defined]
    assert "is already on origin: nothing to do" in again.stdout  # type: ignore[attr-defined]
    assert len([c for c in world.site.gh_calls() if c["argv"][:2] == ["pr", "create"]]) == 1


def test_lock_workflow_follows_a_base_tag_that_moved(world: World) -> None:
    """Last in this module: it moves the base tag that the other runs' lock names."""
    current = world.act("lock.yml", "workflow_dispatch")
    assert current.returncode == 0, tail(current)  # type: ignore[attr-defined]
    assert "images.lock and buildkit/docker-bake.json are current" in current.stdout  # type: ignore[attr-defined]
    base = f"{world.registry.host}/vllm/vllm-openai:v1.0.0"
    before = tools.inspect_required(base).digest
    # a new amd64 image under the tag (a label more): the tag moved, as a re-pushed upstream tag does
    subprocess.run(
        ["docker", "buildx", "build", "--platform", "linux/amd64", "--push", "-t", f"{base}-moved", "-"],
        input=f"FROM {base}-amd64\nLABEL moved=1\n",
        text=True,
        capture_output=True,
        check=True,
    )
    docker("buildx", "imagetools", "create", "-t", base, f"{base}-moved", f"{base}-arm64")
    after = tools.inspect_required(base).digest
    assert after != before
    moved = world.act("lock.yml", "schedule", payload={"schedule": "17 4 * * 1"})
    assert moved.returncode == 0, tail(moved)  # type: ignore[attr-defined]
    created = [c for c in world.site.gh_calls() if c["argv"][:2] == ["pr", "create"] and "imgbuild/lock" in c["argv"]]
    assert len(created) == 1 and after in str(created[0]["body"])
    lock = git(world.site.origin, "show", "imgbuild/lock:images.lock")
    assert after in lock and before not in lock
