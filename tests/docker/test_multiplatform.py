"""Docker 26 with the containerd image store: multi-platform images in one call, reproducible digests.

Skipped on an engine without that path (Debian's 20.10), where `--platform
all` keeps building one platform per call under -<arch> tags (tested last).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from imgbuild.images.docker import Engine
from tests.docker.conftest import MakeProject, cleanup
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


def test_one_call_per_image_for_every_platform_shared_layers_and_smoke(
    modern: Engine, make_project: MakeProject, cli: Cli, prefix: str
) -> None:
    engine = modern
    project = two_platforms(make_project, "multi")
    repo = f"{prefix}-multi"
    proc = cli(project, "build", "--base", "skeleton", "--platform", "all", env={"IMGBUILD_ECHO": "1"})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "every platform of an image at once" in proc.stderr
    calls = buildx_calls(proc.stderr)
    assert len(calls) == 2 and all("imgbuild-export/" in c for c in calls), calls  # each platform's base, once
    layers = [ln for ln in proc.stderr.splitlines() if ln.startswith("+ imgbuild write-layer-image ")]
    assert len(layers) == 2 and all(ln.endswith(" linux/amd64 linux/arm64") for ln in layers), layers
    written = [ln for ln in proc.stderr.splitlines() if ln.startswith("+ imgbuild write-config-image ")]
    assert len(written) == 2 and all(ln.endswith(" linux/amd64 linux/arm64") for ln in written), written

    tags = digests(engine, repo)
    for variant in ("latest", "engram-mem"):
        index = tags[f"{repo}:{variant}"]
        immutable = next(t for t, d in tags.items() if d == index and ":1.0.0-" in t)
        for platform in PLATFORMS:
            arch = platform.split("/")[1]
            info = engine.require(f"{immutable}-{arch}")  # each platform's manifest, named
            assert info.arch == arch and not info.entrypoint and not info.cmd
            assert immutable.endswith(info.labels["imgbuild.inputs"][:12])  # the index's inputs, on every platform
            assert f"{variant}: smoke-testing {immutable}-{arch}" in proc.stderr
    for arch in ("amd64", "arm64"):  # layer sharing holds on every platform
        by_variant = {}
        for variant in ("latest", "engram-mem"):
            immutable = next(t for t, d in tags.items() if d == tags[f"{repo}:{variant}"] and ":1.0.0-" in t)
            by_variant[variant] = engine.require(f"{immutable}-{arch}").layers
        mem, latest = by_variant["engram-mem"], by_variant["latest"]
        assert latest[: len(mem)] == mem and len(latest) == len(mem) + 1, arch

    smoke = cli(project, "smoke", "latest", "engram-mem", "--base", "skeleton", "--platform", "all", "--json")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    reports = json.loads(smoke.stdout)["reports"]
    assert sorted((r["variant"], r["platform"]) for r in reports) == sorted(
        (v, p) for v in ("latest", "engram-mem") for p in PLATFORMS
    )
    for r in reports:
        states = {f["path"]: f["actual"] for f in r["files"]}
        engram = "patched" if r["variant"] == "latest" else "original"
        assert states == {**dict.fromkeys(SM121, "patched"), **dict.fromkeys(ENGRAM, engram)}
        assert any(c["name"] == "run-directly" and c["status"] == "pass" for c in r["checks"])

    one = cli(project, "smoke", f"{repo}:latest", "--platform", "linux/arm64", "--json")  # one platform of the tag
    assert one.returncode == 0, one.stdout + one.stderr
    (report,) = json.loads(one.stdout)["reports"]
    assert report["platform"] == "linux/arm64" and report["image"].endswith("-arm64"), report["image"]

    again = cli(project, "build", "--base", "skeleton", "--platform", "all", env={"IMGBUILD_ECHO": "1"})
    assert again.returncode == 0 and buildx_calls(again.stderr) == [], again.stderr
    assert digests(engine, repo) == tags


def test_two_clean_builds_in_different_directories_give_equal_digests(
    modern: Engine, make_project: MakeProject, cli: Cli, prefix: str, synth_upstream: Upstream, tmp_path: Path
) -> None:
    engine = modern
    first = two_platforms(make_project, "repro")
    repo = f"{prefix}-repro"
    proc = cli(first, "build", "--base", "skeleton", "--platform", "all", "--no-smoke")
    assert proc.returncode == 0, proc.stderr
    before = digests(engine, repo)
    assert len(before) == 2 + 2 * 3  # two layers; per variant the index and one image per platform
    cleanup(engine, repo, synth_upstream.url)
    assert digests(engine, repo) == {}

    second = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(first, second)
    shutil.rmtree(first)
    # --force: no BuildKit cache either, every layer made again
    proc = cli(second, "build", "--base", "skeleton", "--platform", "all", "--no-smoke", "--force")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("building") == 4 and "reused" not in proc.stderr
    assert digests(engine, repo) == before


def test_classic_engine_builds_platforms_one_by_one(engine: Engine, make_project: MakeProject, cli: Cli) -> None:
    if engine.features.modern:
        pytest.skip("the classic path is for engines without the containerd image store")
    project = two_platforms(make_project, "classic")
    proc = cli(project, "build", "latest", "--base", "skeleton", "--platform", "all", "--no-smoke")
    assert proc.returncode == 0, proc.stderr
    assert "one platform per BuildKit call" in proc.stderr
    lines = proc.stderr.splitlines()
    for arch in ("amd64", "arm64"):  # the image once per platform, under -<arch> tags
        assert any(ln.startswith("latest: building") and ln.endswith(f"-{arch} for linux/{arch}") for ln in lines)
    assert not any(", linux/" in ln for ln in lines if "building" in ln), proc.stderr  # never two in one build


def test_builder_is_passed_through_and_makes_the_same_image(
    modern: Engine, make_project: MakeProject, cli: Cli, prefix: str, tmp_path: Path
) -> None:
    engine = modern
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
    # two layers and two variant images, one call per platform (one call for both can crash dockerd 26)
    per_platform = sorted(c.split(" --platform ")[1].split()[0] for c in calls)
    assert per_platform == sorted(PLATFORMS * 4), calls
    # built on the other builder, loaded here: the same files and config (BuildKit's gzip bytes, not ours)
    assert contents(engine, repo) == before
    built = digests(engine, repo)
    via_env = cli(project, *args, env={**env, "BUILDX_BUILDER": f"{prefix}-absent"})
    assert via_env.returncode == 7, via_env.stderr
    assert f'no builder "{prefix}-absent" found' in via_env.stderr, via_env.stderr
    assert digests(engine, repo) == built  # a failed build moves no tag
