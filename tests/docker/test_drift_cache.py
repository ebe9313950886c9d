"""The drift check is kept by (base id, platform, site-packages, pinned hashes): a hit reads nothing from docker."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from imgbuild.builder.bases import DRIFT_DIR, Bases, check_drift
from imgbuild.engine import Engine
from imgbuild.errors import UpstreamError
from imgbuild.project import Project
from tests.docker.conftest import MakeProject
from tests.docker.test_failures import derived

pytestmark = pytest.mark.docker


def reads(capsys: pytest.CaptureFixture[str]) -> int:
    """How many containers the last calls created to read files (IMGBUILD_ECHO's `docker create` lines)."""
    return sum(ln.startswith("+ docker create ") for ln in capsys.readouterr().err.splitlines())


def test_a_passed_drift_check_is_kept_and_each_input_invalidates_it(
    engine: Engine,
    make_project: MakeProject,
    prefix: str,
    skeleton_base: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IMGBUILD_ECHO", "1")
    project = Project.load(make_project("driftcache"))
    plans, selection = project.plan(), project.select()
    resolver = Bases(engine, project, "skeleton", say=lambda _: None)
    bases = {(p.variant.name, pf): resolver.make(p, pf) for p in plans for pf in selection.platforms_of(p.variant.name)}
    cache = tmp_path / "cache"
    capsys.readouterr()

    check_drift(engine, plans, bases, cache)
    assert reads(capsys) == 1 and len(list((cache / DRIFT_DIR).iterdir())) == 1
    check_drift(engine, plans, bases, cache)
    assert reads(capsys) == 0  # a hit: no docker call at all

    # 1. another base id (the same files, one more label)
    other = engine.require(derived(engine, skeleton_base, f"{prefix}-driftcache/base:1", ["LABEL x=1"]))
    moved = {k: dataclasses.replace(b, image_id=other.id, ref=other.tags[0]) for k, b in bases.items()}
    check_drift(engine, plans, moved, cache)
    assert reads(capsys) == 1
    check_drift(engine, plans, moved, cache)
    assert reads(capsys) == 0

    # 2. another site-packages: checked again (and refused: vllm/ is not there)
    elsewhere = {k: dataclasses.replace(b, site_packages="/opt/site-packages") for k, b in bases.items()}
    with pytest.raises(UpstreamError, match="/opt/site-packages/vllm/"):
        check_drift(engine, plans, elsewhere, cache)
    # the check's read, then the look for where the base does keep the tree (to say so in the error)
    failed_reads = reads(capsys)
    assert failed_reads >= 1
    with pytest.raises(UpstreamError):  # a failure is never kept: the same reads again
        check_drift(engine, plans, elsewhere, cache)
    assert reads(capsys) == failed_reads

    # 3. another pinned hash of a planned file: checked again, and refused
    path = plans[0].files[0].path
    repinned = [
        dataclasses.replace(
            p, files=tuple(dataclasses.replace(f, pristine_sha256="0" * 64) if f.path == path else f for f in p.files)
        )
        for p in plans
    ]
    with pytest.raises(UpstreamError, match="0" * 64):
        check_drift(engine, repinned, bases, cache)
    assert reads(capsys) == 1
    check_drift(engine, plans, bases, cache)  # the original inputs still hit
    assert reads(capsys) == 0
