"""Several platforms: one BuildKit call per image and platform, a FROM-only join per variant, reproducible digests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from imgbuild.engine import Engine
from tests.docker.conftest import MakeProject, cleanup
from tests.support.jsonschema_check import load_json
from tests.support.registry_env import set_platforms
from tests.support.runner import Cli
from tests.support.synth import Upstream
from tests.support.synth_images import ENGRAM, SM121

pytestmark = pytest.mark.docker
PLATFORMS = ("linux/amd64", "linux/arm64")


def two_platforms(make_project: MakeProject, name: str) -> Path:
    project = make_project(name)
    set_platforms(project, ["linux/arm64", "linux/amd64"])
    return project


def digests(engine: Engine, repo: str) -> dict[str, str]:
    """tag -> image id (a manifest or index digest on the containerd store) for every tag of `repo`."""
    return {t: img.id for img in engine.client.images.list(name=repo) for t in img.tags if t.startswith(f"{repo}:")}


def contents(engine: Engine, repo: str) -> dict[str, tuple[object, ...]]:
    """tag -> what its image holds (layer diff_ids, labels, env, entrypoint, cmd), whoever compressed its layers."""
    out: dict[str, tuple[object, ...]] = {}
    for tag in digests(engine, repo):
        info = engine.require(tag)
        out[tag] = (info.layers, info.labels, info.env, info.entrypoint, info.cmd)
    return out


def buildx_calls(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("+ ") and " buildx build " in ln]


def platforms_of(stderr: str) -> list[str]:
    """The --platform of each buildx call, in order."""
    return [c.split(" --platform ")[1].split()[0] for c in buildx_calls(stderr)]


def index_manifests(index_id: str) -> dict[str, str]:
    """platform -> manifest digest of a multi-platform image in the engine's store (read with containerd's ctr,
    since Docker 26's API shows one platform of an index only)."""
    socks = [s for s in ("/var/run/docker/containerd/containerd.sock", "/run/containerd/containerd.sock")
             if os.path.exists(s)]  # fmt: skip
    assert socks, "no containerd socket to read the index from"
    done = subprocess.run(["ctr", "-a", socks[0], "-n", "moby", "content", "get", index_id],
                          capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)["manifests"]
    return {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in entries}


def test_one_call_per_image_and_platform_then_a_join_that_takes_the_moving_tags(
    engine: Engine, make_project: MakeProject, cli: Cli, prefix: str
) -> None:
    project = two_platforms(make_project, "multi")
    repo = f"{prefix}-multi"
    proc = cli(project, "build", "--base", "skeleton", "--platform", "all", "--json", env={"IMGBUILD_ECHO": "1"})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # one call per image and platform; then one join per variant, FROM lines only
    both = "linux/arm64,linux/amd64"
    assert sorted(platforms_of(proc.stderr)) == sorted([*PLATFORMS * 2, both, both]), proc.stderr
    assert platforms_of(proc.stderr)[-2:] == [both, both]  # the joins come after every platform passed

    images = load_json(proc.stdout)["images"]
    tags = digests(engine, repo)
    for variant in ("latest", "engram-mem"):
        parts = {i["platform"]: i for i in images if i["variant"] == variant}
        assert sorted(parts) == sorted(PLATFORMS)
        for platform, part in parts.items():
            info = engine.require(part["immutable"])  # each platform's image under its own immutable tag
            assert str(info.platform) == platform and not info.entrypoint and not info.cmd
            assert part["immutable"].endswith(info.labels["imgbuild.inputs"][:12]) and "-arm64" not in part["immutable"]
            assert part["smoke"]["ok"] and f"{variant}: smoke-testing {part['immutable']}" in proc.stderr
            assert part["index"] == tags[f"{repo}:{variant}"] and part["moved"]
        # the moving tag is the index over exactly those images, as they are
        assert index_manifests(tags[f"{repo}:{variant}"]) == {p: i["image_id"] for p, i in parts.items()}
    for platform in PLATFORMS:  # layer sharing holds on every platform
        by_variant = {i["variant"]: engine.require(i["immutable"]).layers for i in images if i["platform"] == platform}
        mem, latest = by_variant["engram-mem"], by_variant["latest"]
        assert latest[: len(mem)] == mem and len(latest) == len(mem) + 1, platform

    smoke = cli(project, "smoke", "latest", "engram-mem", "--base", "skeleton", "--platform", "all", "--json")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    reports = load_json(smoke.stdout)["reports"]
    assert sorted((r["variant"], r["platform"]) for r in reports) == sorted(
        (v, p) for v in ("latest", "engram-mem") for p in PLATFORMS
    )
    for r in reports:
        states = {f["path"]: f["actual"] for f in r["files"]}
        engram = "patched" if r["variant"] == "latest" else "original"
        assert states == {**dict.fromkeys(SM121, "patched"), **dict.fromkeys(ENGRAM, engram)}
        assert any(c["name"] == "run-directly" and c["status"] == "pass" for c in r["checks"])

    host = str(engine.platform)
    other = next(p for p in PLATFORMS if p != host)
    wrong = cli(project, "smoke", f"{repo}:latest", "--platform", other, "--json")  # the index shows the host's
    assert wrong.returncode == 7 and "name that platform's own image" in wrong.stdout, wrong.stdout + wrong.stderr
    arm = next(i for i in images if i["variant"] == "latest" and i["platform"] == other)
    one = cli(project, "smoke", arm["immutable"], "--platform", other, "--json")
    assert one.returncode == 0, one.stdout + one.stderr
    (report,) = load_json(one.stdout)["reports"]
    assert report["platform"] == other

    again = cli(project, "build", "--base", "skeleton", "--platform", "all", "--json", env={"IMGBUILD_ECHO": "1"})
    assert again.returncode == 0 and buildx_calls(again.stderr) == [], again.stderr
    assert digests(engine, repo) == tags
    assert "nothing changed since this build last ran" in again.stderr, again.stderr  # its receipt, joins too
    kept = [(i["variant"], i["platform"], i["image_id"], i["index"], i["index_ref"]) for i in images]
    assert [
        (i["variant"], i["platform"], i["image_id"], i["index"], i["index_ref"])
        for i in load_json(again.stdout)["images"]
    ] == kept


def test_two_clean_builds_in_different_directories_give_equal_digests(
    engine: Engine, make_project: MakeProject, cli: Cli, prefix: str, synth_upstream: Upstream, tmp_path: Path
) -> None:
    first = two_platforms(make_project, "repro")
    repo = f"{prefix}-repro"
    proc = cli(first, "build", "--base", "skeleton", "--platform", "all", "--no-smoke")
    assert proc.returncode == 0, proc.stderr
    before = digests(engine, repo)
    assert len(before) == 2 * 2 + 2  # two images per platform, a join per variant (no smoke: no moving tag)
    cleanup(engine, repo, synth_upstream.url)
    assert digests(engine, repo) == {}

    second = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(first, second)
    shutil.rmtree(first)
    # --force: no BuildKit cache either, every layer made again
    proc = cli(second, "build", "--base", "skeleton", "--platform", "all", "--no-smoke", "--force")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("building") == 4 and proc.stderr.count("joining") == 2 and "reused" not in proc.stderr
    assert digests(engine, repo) == before


def test_builder_is_passed_through_and_makes_the_same_image(
    engine: Engine, make_project: MakeProject, cli: Cli, prefix: str, tmp_path: Path
) -> None:
    # A second builder: a docker context (another dockerd, as a native arm64 node would be).
    # This one reaches the daemon under test through a context of its own, in its own docker config.
    config = tmp_path / "docker-config"
    config.mkdir()
    env = {"DOCKER_CONFIG": str(config)}
    name = f"{prefix}-node"
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    made = subprocess.run(
        ["docker", "context", "create", name, "--docker", f"host={host}"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    project = two_platforms(make_project, "builder")
    repo = f"{prefix}-builder"
    assert cli(project, "build", "--base", "skeleton", "--platform", "all", "--no-smoke").returncode == 0
    before = contents(engine, repo)
    args = ("build", "--base", "skeleton", "--platform", "all", "--no-smoke", "--force")
    proc = cli(project, *args, "--builder", name, env={**env, "IMGBUILD_ECHO": "1"})
    assert proc.returncode == 0, proc.stderr
    calls = buildx_calls(proc.stderr)
    assert all(c.startswith(f"+ docker --context {name} buildx build") for c in calls), calls
    # two variant images, one call per platform (one call building both can crash dockerd 26),
    # then the two joins, which build nothing
    both = "linux/arm64,linux/amd64"
    assert sorted(platforms_of(proc.stderr)) == sorted([*PLATFORMS * 2, both, both]), calls
    # built on the other builder, loaded here: the same files and config
    assert contents(engine, repo) == before
    built = digests(engine, repo)
    via_env = cli(project, *args, env={**env, "BUILDX_BUILDER": f"{prefix}-absent"})
    assert via_env.returncode == 7, via_env.stderr
    assert f'no builder "{prefix}-absent" found' in via_env.stderr, via_env.stderr
    assert digests(engine, repo) == built  # a failed build moves no tag
