"""Several platforms in one build (pure): the engine's path, stage aliases, one inputs digest per index."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from imgbuild.errors import ConfigError
from imgbuild.images import labels
from imgbuild.images.build import project_inputs
from imgbuild.images.docker import EngineFeatures, parse_version
from imgbuild.images.dockerfile import context_files, listing
from imgbuild.images.multiplan import MultiPlan, index_inputs, make_multi_plan
from imgbuild.images.plan import BaseInfo, BuildPlan, make_build_plan
from imgbuild.project import Project
from tests.support.synth import Upstream
from tests.support.synth_images import ENGRAM, SITE, SM121, engram_project, release

PLATFORMS = ("linux/amd64", "linux/arm64")
SKEL = {"linux/arm64": "skel:arm64-1", "linux/amd64": "skel:amd64-1"}


def base_id(platform: str) -> str:
    return "sha256:" + ("a" if platform.endswith("arm64") else "d") * 64


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    release(upstream)
    return Project.load(engram_project(tmp_path / "p", upstream, "vllm-test"))


def plans(project: Project, site: dict[str, str] | None = None) -> tuple[BuildPlan, MultiPlan]:
    vplans = project.selected_plans(project.select(platform=",".join(PLATFORMS)))
    bases = {
        (p.variant.name, pf): BaseInfo(SKEL[pf], base_id(pf), base_id(pf), pf, (site or {}).get(pf, SITE))
        for p in vplans
        for pf in PLATFORMS
    }
    inputs = project_inputs(project)
    plan = make_build_plan(inputs, vplans, bases, ["latest", "engram-mem"])
    return plan, make_multi_plan(inputs, plan)


DAEMON_26 = (
    {"Version": "26.1.5+dfsg1", "ApiVersion": "1.45"},
    {"DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]},
)
DAEMON_20 = (
    {"Version": "20.10.24+dfsg1", "ApiVersion": "1.41"},
    {"DriverStatus": [["Backing Filesystem", "extfs"], ["Supports d_type", "true"]]},
)


def test_engine_path_is_read_from_version_and_image_store() -> None:
    assert parse_version("26.1.5+dfsg1") == (26, 1, 5) and parse_version("v28.0") == (28, 0, 0)
    assert parse_version("unknown") == (0, 0, 0)
    modern = EngineFeatures.from_daemon(*DAEMON_26)
    assert modern.modern and modern.containerd_store
    assert "every platform of an image at once" in modern.describe()
    old = EngineFeatures.from_daemon(*DAEMON_20)
    assert not old.modern and not old.containerd_store
    assert "one platform per BuildKit call" in old.describe() and "20.10.24" in old.describe()
    classic_26 = EngineFeatures.from_daemon(DAEMON_26[0], DAEMON_20[1])  # 26 without the containerd store
    assert not classic_26.modern and "containerd image store builds them in one call" in classic_26.describe()
    assert not EngineFeatures.from_daemon({"Version": "25.0.3"}, DAEMON_26[1]).modern  # BuildKit 0.12


def test_platform_option_takes_a_list(project: Project) -> None:
    plans = project.selected_plans(project.select(platform="linux/amd64,linux/arm64"))
    assert [p.variant.image.platforms for p in plans] == [PLATFORMS] * 2


def test_layers_become_one_build_each_with_per_arch_parents(project: Project) -> None:
    plan, multi = plans(project)
    assert len(plan.layers) == 4 and len(multi.layers) == 2  # two platforms zipped into one build per layer
    bottom, top = multi.layers
    assert (bottom.files, top.files) == (SM121, ENGRAM) and bottom.platforms == PLATFORMS
    lines = bottom.dockerfile.splitlines()
    assert "FROM skel:amd64-1 AS parent-amd64" in lines and "FROM skel:arm64-1 AS parent-arm64" in lines
    assert "FROM parent-${TARGETARCH}" in lines and not any("${TARGETARCH}" in ln and ":" in ln for ln in lines)
    assert f"FROM {bottom.tag} AS parent-arm64" in top.dockerfile  # the top layer sits on the multi-platform one
    assert f'{labels.LAYER}="{bottom.digest}"' in bottom.dockerfile
    assert sorted(context_files(bottom.context)) == sorted(SM121)
    assert {e.name for e in listing(bottom.context)} >= {"Dockerfile", *SM121}


def test_images_have_per_arch_labels_and_one_inputs_digest(project: Project) -> None:
    plan, multi = plans(project)
    latest = next(mi for mi in multi.images if mi.variant == "latest")
    per = {ib.platform: ib for ib in plan.images if ib.variant == "latest"}
    assert latest.inputs_digest == index_inputs({p: ib.inputs_digest for p, ib in per.items()})
    assert latest.immutable_ref == f"vllm-test:1.0.0-{latest.inputs_digest[:12]}"
    assert latest.moving_refs == ("vllm-test:latest",)  # no -<arch> suffix: the tag is the index
    assert latest.platform_refs == {p: f"{latest.immutable_ref}-{p.split('/')[1]}" for p in PLATFORMS}
    for part in latest.parts:
        assert part.labels[labels.INPUTS] == latest.inputs_digest
        assert part.labels["org.opencontainers.image.base.digest"] == base_id(part.platform)
        assert part.from_ref == multi.layers[1].tag
    text = latest.dockerfile
    assert text.rstrip().endswith("FROM image-${TARGETARCH}")
    assert f"FROM {multi.layers[1].tag} AS image-arm64" in text and f"FROM {multi.layers[1].tag} AS image-amd64" in text
    assert text.count("ENTRYPOINT []") == 2 and text.count(base_id("linux/arm64")) == 1


def test_equal_inputs_give_equal_plans_and_a_new_base_a_new_digest(project: Project) -> None:
    _, a = plans(project)
    _, b = plans(project)
    assert [ml.digest for ml in a.layers] == [ml.digest for ml in b.layers]
    assert [(mi.dockerfile, mi.context) for mi in a.images] == [(mi.dockerfile, mi.context) for mi in b.images]
    plan, _ = plans(project)
    moved = [
        dataclasses.replace(ib, inputs_digest="0" * 64) if ib.platform == "linux/amd64" else ib for ib in plan.images
    ]
    other = make_multi_plan(project_inputs(project), dataclasses.replace(plan, images=tuple(moved)))
    assert other.images[0].inputs_digest != a.images[0].inputs_digest


def test_platforms_with_different_site_packages_are_refused(project: Project) -> None:
    with pytest.raises(ConfigError, match="differs between platforms"):
        plans(project, site={"linux/amd64": "/usr/lib/python3/dist-packages"})
