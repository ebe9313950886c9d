"""`smoke VARIANT` asks the plan where the image is (builder/locate.py): nothing is pulled or built to learn it,
and the reference is the one `build` makes (issue 35 item 4). An engine that only answers what its store holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from imgbuild.builder import bases, locate, runner
from imgbuild.builder.options import BuildOptions
from imgbuild.engine import Engine, ImageInfo
from imgbuild.errors import SmokeError
from imgbuild.platforms import Platform
from imgbuild.project import Project
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release

BASE = "registry.example/vllm/vllm-openai:v1.0.0"


class StoreOnly:
    """The local image store holds `images`; a pull, a build or a container run fails the test."""

    arch = "aarch64"

    def __init__(self, images: dict[str, ImageInfo]) -> None:
        self.images, self.asked = images, list[str]()

    def image(self, ref: str) -> ImageInfo | None:
        self.asked.append(ref)
        return self.images.get(ref)

    def __getattr__(self, name: str) -> Any:  # pull, build, run, tag...: none may be asked
        raise AssertionError(f"smoke asked the engine to {name}")


def base_image() -> ImageInfo:
    return ImageInfo("sha256:" + "b" * 64, (BASE,), (), "linux", "arm64", "v8", None, None, (), {}, (), 1)


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    release(upstream)
    return Project.load(engram_project(tmp_path / "p", upstream, "vllm-dsv41", base=BASE))


def test_a_base_not_in_the_store_is_neither_pulled_nor_built(project: Project) -> None:
    store = StoreOnly({})
    with pytest.raises(SmokeError, match=f"its base {BASE} is not in the local image store") as raised:
        locate.smoke_variants(cast(Engine, store), project, project.select(["latest"], None), BuildOptions())
    assert raised.value.hint == "build it first: imgbuild build latest"
    # the stand-in is not built either: its tag is only looked for
    with pytest.raises(SmokeError, match="not in the local image store"):
        opts = BuildOptions(base="skeleton")
        locate.smoke_variants(cast(Engine, store), project, project.select(["latest"], None), opts)
    skeleton_tag = bases.skeleton_spec(project, None, Platform.parse("linux/arm64")).tag
    assert store.asked[-1] == skeleton_tag, store.asked


def test_the_image_is_looked_for_under_the_reference_build_makes(project: Project) -> None:
    store = StoreOnly({BASE: base_image()})
    selection = project.select(["latest"], None)
    planned = locate.locate(cast(Engine, store), project, selection, BuildOptions())
    built = runner.dry_plan(project, selection, BuildOptions(), cast(Engine, store)).plan
    assert [ib.immutable_ref for ib in planned.images] == [ib.immutable_ref for ib in built.images]
    assert [ib.base.image_id for ib in planned.images] == [base_image().id]
    with pytest.raises(SmokeError, match=f"no image {planned.images[0].immutable_ref} for the current inputs"):
        locate.smoke_variants(cast(Engine, store), project, selection, BuildOptions())
