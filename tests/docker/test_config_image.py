"""Config-only variant images written without BuildKit (configimage.py) hold the config BuildKit writes.

Docker 26 with the containerd image store only (the classic path builds them with BuildKit).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imgbuild.images import labels, ocilayout
from imgbuild.images.build import OCI_LAYOUT_DIR, BuildOptions, prepare
from imgbuild.images.docker import Engine
from imgbuild.images.inputs import project_inputs
from imgbuild.project import Project
from tests.docker.conftest import MakeProject
from tests.support.registry_env import set_platforms
from tests.support.runner import Cli

pytestmark = pytest.mark.docker


def buildkit_ids(engine: Engine, project: Path, cache: Path, platform: str | None) -> dict[str, str]:
    """immutable ref -> the id BuildKit gives the same variant Dockerfile (built under a scratch tag)."""
    proj = Project.load(project)
    opts = BuildOptions(base="skeleton")
    plan, multi = prepare(engine, proj, proj.select(["latest", "engram-mem"], platform), opts, lambda _: None)
    epoch = labels.epoch(project_inputs(proj).created)
    builds = [(mi.immutable_ref, mi.context, ",".join(mi.platforms)) for mi in multi.images] if multi else []
    builds = builds or [(ib.immutable_ref, ib.context, ib.platform) for ib in plan.images]
    out = {}
    for ref, context, platforms in builds:
        scratch = ref.rsplit(":", 1)[0] + ":buildkit-" + ref.rsplit("-", 1)[-1]
        out[ref] = engine.build(context, tags=[scratch], platform=platforms, epoch=epoch, layout=cache / OCI_LAYOUT_DIR)
        engine.untag(scratch)
    return out


@pytest.mark.usefixtures("prefix")
@pytest.mark.parametrize("platforms", [None, "all"], ids=["one-platform", "two-platforms"])
def test_written_image_is_the_buildkit_image(
    modern: Engine,
    make_project: MakeProject,
    cli: Cli,
    platforms: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "cfg1" if platforms is None else "cfg2"
    project = make_project(name)
    if platforms:
        set_platforms(project, ["linux/arm64", "linux/amd64"])
    cache = Path(str(project) + "-cache")
    monkeypatch.setenv("IMGBUILD_CACHE", str(cache))
    args = ["build", "--base", "skeleton", "--no-smoke", *(["--platform", platforms] if platforms else [])]
    proc = cli(project, *args, env={"IMGBUILD_ECHO": "1", "IMGBUILD_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr
    calls = [ln for ln in proc.stderr.splitlines() if ln.startswith("+ ")]
    exports = [c for c in calls if " buildx build " in c]  # only the base, into the layout, per platform
    assert len(exports) == (2 if platforms else 1) and all("imgbuild-export/" in c for c in exports), calls
    assert sum(c.startswith("+ imgbuild write-layer-image ") for c in calls) == 2, calls
    assert sum(c.startswith("+ imgbuild write-config-image ") for c in calls) == 2, calls
    expected = buildkit_ids(modern, project, cache, platforms)
    assert len(expected) == 2
    layout = cache / OCI_LAYOUT_DIR
    for ref, image_id in expected.items():
        for platform in ["linux/arm64", "linux/amd64"] if platforms else ["linux/arm64"]:
            ours = ocilayout.platform_image(layout, modern.require(ref).id, platform)
            theirs = ocilayout.platform_image(layout, image_id, platform)
            assert ours and theirs, (ref, platform)
            assert ours[2] == theirs[2], (ref, platform)  # the same config bytes: labels, env, history, diff_ids
            # and the same layers, but BuildKit may name one by its own gzip of the same tar (layerimage.py)
            assert len(json.loads(ours[1])["layers"]) == len(json.loads(theirs[1])["layers"])


def test_a_lost_layout_is_written_again_with_the_same_ids(
    modern: Engine, make_project: MakeProject, cli: Cli, prefix: str
) -> None:
    project = make_project("cfgfallback")
    cache = Path(str(project) + "-cache")
    env = {"IMGBUILD_ECHO": "1", "IMGBUILD_CACHE": str(cache)}
    first = cli(project, "build", "--base", "skeleton", "--no-smoke", env=env)
    assert first.returncode == 0, first.stderr
    repo = f"{prefix}-cfgfallback"
    images = {t: img.id for img in modern.client.images.list(name=repo) for t in img.tags if ":1.0.0-" in t}
    assert len(images) == 2
    for tag in images:
        modern.untag(tag)
    shutil.rmtree(cache / OCI_LAYOUT_DIR)  # the layers stay in the store; their manifests and configs are gone here
    again = cli(project, "build", "--base", "skeleton", "--no-smoke", env=env)
    assert again.returncode == 0, again.stderr
    calls = [ln for ln in again.stderr.splitlines() if ln.startswith("+ ")]
    exports = [c for c in calls if " buildx build " in c]
    assert len(exports) == 1 and "imgbuild-export/" in exports[0], calls  # the base into the new layout
    assert again.stderr.count("written again into the cache's OCI layout") == 2, again.stderr
    assert again.stderr.count("+ imgbuild write-config-image ") == 2, again.stderr
    assert {t: modern.require(t).id for t in images} == images


def test_images_the_store_dropped_but_the_layout_kept_are_loaded_again(
    modern: Engine, make_project: MakeProject, cli: Cli, prefix: str
) -> None:
    project = make_project("cfgdropped")
    cache = Path(str(project) + "-cache")
    env = {"IMGBUILD_ECHO": "1", "IMGBUILD_CACHE": str(cache)}
    first = cli(project, "build", "--base", "skeleton", "--no-smoke", env=env)
    assert first.returncode == 0, first.stderr
    repo = f"{prefix}-cfgdropped"
    before = {t: img.id for img in modern.client.images.list(name=repo) for t in img.tags if t.startswith(repo)}
    assert sum(":layer-" in t for t in before) == 2 and sum(":1.0.0-" in t for t in before) == 2, before
    for tag in before:  # every name gone: the store drops their manifests, configs and the new layers
        modern.untag(tag)
    again = cli(project, "build", "--base", "skeleton", "--no-smoke", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("+ imgbuild write-config-image ") == 2, again.stderr
    assert {t: modern.require(t).id for t in before} == before
