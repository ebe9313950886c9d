"""The base resolver's two entry points (builder/bases.py): `find` asks the local image store only and names what is
missing with the command that makes it; `make` finds, else pulls. An engine that answers only what its store holds
(and, for `make`, what a pull brings); a build or a container run fails the test."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import cast

import pytest

from imgbuild.builder.bases import BaseMissing, Bases, skeleton_spec, wanted
from imgbuild.engine import Engine, ImageInfo
from imgbuild.errors import DockerError
from imgbuild.platforms import Platform
from imgbuild.project import Project
from tests.git.test_smoke_locate import BASE, StoreOnly, base_image
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release

ARM = Platform.parse("linux/arm64")
SITE = "/usr/local/lib/python3.12/dist-packages"


class Pulls(StoreOnly):
    """A store that a pull fills: `registry` holds what each reference pulls to."""

    def __init__(self, images: dict[str, ImageInfo], registry: dict[str, ImageInfo]) -> None:
        super().__init__(images)
        self.registry, self.pulled = registry, list[tuple[str, Platform]]()

    def pull(self, ref: str, platform: Platform) -> ImageInfo:
        self.pulled.append((ref, platform))
        self.images[ref] = self.registry[ref]
        return self.images[ref]


DIGEST = "sha256:" + "d" * 64


def labelled(info: ImageInfo) -> ImageInfo:
    """`info` as pulled from a registry (a repo digest), its label saying where vllm/ lives."""
    return dataclasses.replace(info, repo_digests=(f"{BASE}@{DIGEST}",), labels={"imgbuild.site-packages": SITE})


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    release(upstream)
    return Project.load(engram_project(tmp_path / "p", upstream, "vllm-dsv41", base=BASE))


def test_find_names_a_missing_base_and_the_command_that_makes_it(project: Project) -> None:
    plan = next(p for p in project.plan() if p.variant.name == "latest")
    store = StoreOnly({})
    with pytest.raises(BaseMissing) as raised:
        Bases(cast(Engine, store), project, None).find(plan, ARM)
    assert (raised.value.ref, raised.value.variant) == (BASE, "latest")
    assert str(raised.value) == f"latest: its base {BASE} is not in the local image store"
    assert raised.value.hint == "build it first: imgbuild build latest"
    assert store.asked == [BASE]  # asked, never pulled (StoreOnly fails on a pull)

    # a stand-in is looked for under its own tag, and the command names --base
    with pytest.raises(BaseMissing) as raised:
        Bases(cast(Engine, store), project, "skeleton").find(plan, ARM)
    assert raised.value.ref == skeleton_spec(project, None, ARM).tag == store.asked[-1]
    assert raised.value.hint == "build it first: imgbuild build latest --base skeleton"


def test_find_gives_the_stored_base_as_make_would(project: Project) -> None:
    plan = next(p for p in project.plan() if p.variant.name == "latest")
    info = labelled(base_image())
    found = Bases(cast(Engine, StoreOnly({BASE: info})), project, None).find(plan, ARM)
    made = Bases(cast(Engine, StoreOnly({BASE: info})), project, None).make(plan, ARM)
    assert found == made
    assert (found.ref, found.image_id, found.digest, found.site_packages, found.local) == (
        BASE,
        info.id,
        DIGEST,
        SITE,
        False,
    )

    tag = wanted(project, plan, ARM, "skeleton").ref
    stand_in = Bases(cast(Engine, StoreOnly({tag: info})), project, "skeleton").find(plan, ARM)
    assert (stand_in.ref, stand_in.local, stand_in.digest) == (tag, True, None)  # built here: no registry origin


def test_find_refuses_a_stored_base_of_another_platform(project: Project) -> None:
    plan = next(p for p in project.plan() if p.variant.name == "latest")
    amd = dataclasses.replace(labelled(base_image()), arch="amd64", variant="")
    with pytest.raises(DockerError, match=f"base {BASE} in the local image store is linux/amd64"):
        Bases(cast(Engine, StoreOnly({BASE: amd})), project, None).find(plan, ARM)


def test_make_pulls_what_find_does_not_find(project: Project) -> None:
    plans = [p for p in project.plan() if p.variant.name in ("latest", "engram-mem")]
    said: list[str] = []
    store = Pulls({}, {BASE: labelled(base_image())})
    resolver = Bases(cast(Engine, store), project, None, say=said.append)
    with pytest.raises(BaseMissing):
        resolver.find(plans[0], ARM)
    made = [resolver.make(p, ARM) for p in plans]
    assert store.pulled == [(BASE, ARM)]  # once for the run: the second variant finds what the first pulled
    assert said == [f"base {BASE} is not in the local image store; pulling it for {ARM}"]
    assert {m.image_id for m in made} == {base_image().id}
    assert resolver.find(plans[0], ARM) == made[0]
