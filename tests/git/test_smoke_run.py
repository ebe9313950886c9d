"""`smoke` as a library call (deploy/smoke_run.py): the targets sorted and checked before any engine is asked,
then each found where it is, nothing pulled or built (an engine that only answers what its store holds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from imgbuild.builder.options import BuildOptions
from imgbuild.deploy import smoke_run
from imgbuild.engine import Engine
from imgbuild.errors import ConfigError, DockerError, SmokeError, UsageError
from imgbuild.project import Project
from tests.git.test_smoke_locate import BASE, StoreOnly, base_image
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    release(upstream)
    return Project.load(engram_project(tmp_path / "p", upstream, "vllm-dsv41", base=BASE))


def test_targets_are_variants_or_image_references_checked_before_any_engine(project: Project, tmp_path: Path) -> None:
    chosen = smoke_run.targets_of(project, ["vllm-dsv41:latest", "latest", "engram-mem"], "linux/arm64", None)
    assert chosen == smoke_run.Targets(("latest", "engram-mem"), ("vllm-dsv41:latest",), "linux/arm64", None)
    assert smoke_run.targets_of(project, ["latest"], "all", None).platform == "all"
    with pytest.raises(UsageError, match="--platform all: an image reference is checked for one platform"):
        smoke_run.targets_of(project, ["latest", "vllm-dsv41:latest"], "all", None)
    # without a project every target is an image reference
    assert smoke_run.targets_of(None, ["latest"], None, None).images == ("latest",)
    with pytest.raises(UsageError, match="--platform linux/arm64,linux/amd64: an image reference is checked for one"):
        smoke_run.targets_of(project, ["latest", "vllm-dsv41:latest"], "linux/arm64,linux/amd64", None)
    assert smoke_run.targets_of(project, ["latest"], "linux/arm64,linux/amd64", None).variants == ("latest",)
    with pytest.raises(UsageError, match="--platform linux/s390x: unsupported platform; known: linux/arm64"):
        smoke_run.targets_of(project, ["latest"], "linux/s390x", None)
    key = tmp_path / "cosign.pub"
    with pytest.raises(UsageError, match="--key checks what a registry holds; 'latest' is a variant of this project"):
        smoke_run.targets_of(project, ["latest"], None, key)
    with pytest.raises(UsageError, match="'vllm-dsv41:latest' is a local name"):
        smoke_run.targets_of(project, ["vllm-dsv41:latest"], None, key)
    with pytest.raises(ConfigError, match=f"--key {key} does not exist"):
        smoke_run.targets_of(project, ["reg.example/vllm-dsv41:latest"], None, key)


def test_run_finds_each_target_where_it_is_and_pulls_or_builds_nothing(project: Project) -> None:
    store = StoreOnly({BASE: base_image()})
    variant = smoke_run.targets_of(project, ["latest"], None, None)
    with pytest.raises(SmokeError, match=r"latest: no image \S+ for the current inputs") as raised:
        smoke_run.run(cast(Engine, store), project, variant, BuildOptions())
    assert raised.value.hint == "build it first: imgbuild build latest"
    image = smoke_run.targets_of(project, ["vllm-dsv41:gone"], None, None)
    with pytest.raises(DockerError, match="vllm-dsv41:gone"):
        smoke_run.run(cast(Engine, store), project, image, BuildOptions())
    assert "vllm-dsv41:gone" in store.asked


def test_a_variant_is_found_without_loading_the_build() -> None:
    """`smoke VARIANT` goes smoke_run -> builder/locate.py -> `Bases.find`: the build (builder/runner.py) and its
    checks of a base (base_probe.py, packages.py) are not on its way, nor imported."""
    code = "import sys, imgbuild.deploy.smoke_run; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert {"imgbuild.builder.locate", "imgbuild.builder.bases", "imgbuild.smoke.expected"} <= loaded
    build = {f"imgbuild.builder.{m}" for m in ("runner", "base_probe", "packages")}
    assert loaded & build == set()
