"""The base resolver on a real engine (builder/bases.py): `find` reads the local image store and nothing else, `make`
finds, else pulls or builds the stand-in; both give one base the same way."""

from __future__ import annotations

import pytest

from imgbuild.builder.bases import BaseMissing, Bases
from imgbuild.engine import Engine
from imgbuild.errors import DockerError
from imgbuild.platforms import Platform
from imgbuild.project import Project
from tests.docker.conftest import MakeProject
from tests.docker.test_failures import derived

pytestmark = pytest.mark.docker

ARM = Platform.parse("linux/arm64")


def builds(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The docker commands of the last calls that make or fetch an image (IMGBUILD_ECHO's lines)."""
    err = capsys.readouterr().err.splitlines()
    return [ln for ln in err if ln.startswith("+ ") and (" buildx build " in ln or " pull " in ln)]


def test_find_and_make_give_a_stored_base_alike_and_make_nothing(
    engine: Engine,
    make_project: MakeProject,
    prefix: str,
    skeleton_base: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IMGBUILD_ECHO", "1")
    capsys.readouterr()
    base = derived(engine, skeleton_base, f"{prefix}-bases/base:1", ["LABEL imgbuild.test=bases"])
    assert len(builds(capsys)) == 1  # what a build echoes
    project = Project.load(make_project("bases"))
    plan = next(p for p in project.plan() if p.variant.name == "latest")
    said: list[str] = []
    for given, ref, local in ((base, base, False), ("skeleton", skeleton_base, True)):
        found = Bases(engine, project, given, say=said.append).find(plan, ARM)
        made = Bases(engine, project, given, say=said.append).make(plan, ARM)
        assert found == made
        assert (found.ref, found.image_id, found.local) == (ref, engine.require(ref).id, local)
    assert builds(capsys) == [] and said == []  # both in the store: `make` pulled nothing and kept the stand-in


def test_find_neither_pulls_nor_builds_a_missing_base_and_make_pulls_it(
    engine: Engine, make_project: MakeProject, prefix: str
) -> None:
    absent = f"{prefix}-absent/base:2"
    project = Project.load(make_project("absent"))
    plan = next(p for p in project.plan() if p.variant.name == "latest")
    said: list[str] = []
    resolver = Bases(engine, project, absent, say=said.append)
    with pytest.raises(BaseMissing) as raised:
        resolver.find(plan, ARM)
    assert str(raised.value) == f"latest: its base {absent} is not in the local image store"
    assert raised.value.hint == f"build it first: imgbuild build latest --base {absent}"
    assert said == [] and engine.image(absent) is None
    with pytest.raises(DockerError, match=f"pulling it for {ARM} failed"):  # nothing serves it here
        resolver.make(plan, ARM)
    assert said == [f"base {absent} is not in the local image store; pulling it for {ARM}"]
