"""The shipped patches against the real pinned release (downloaded once, cached)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from imgbuild.project import Project
from tests.support.jsonschema_check import load_json

pytestmark = pytest.mark.release
ROOT = Path(__file__).resolve().parents[2]


def test_pinned_release_materializes_to_the_pinned_commit() -> None:
    project = Project.load(ROOT)
    assert project.upstream.commit == project.pin.commit
    for patch in project.patches:
        for path in patch.paths:
            assert project.tree().read(path) is not None, f"{patch.name}: {path} is not in {project.pin.tag}"


def test_every_shipped_patch_applies_exactly() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(ROOT), "patches", "check", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    report = load_json(proc.stdout)
    assert report["ok"] and report["lint"] == []
    assert [p["method"] for p in report["patches"]] == ["exact"] * len(report["patches"])
    for p in report["patches"]:
        for f in p["files"]:
            assert all(h["method"] == "exact" and h["offset"] == 0 for h in f["hunks"])


def test_plan_matrix_for_shipped_variants() -> None:
    project = Project.load(ROOT)
    plans = {p.variant.name: p for p in project.plan()}
    latest, mem = plans["latest"], plans["engram-mem"]
    engram = {p.name for p in project.patches if p.group == "engram"}
    assert all(f.state == "patched" for f in latest.files)
    for f in mem.files:
        touched_by_engram_only = all(p in engram for p in (x.name for x in project.patches if f.path in x.paths))
        assert f.state == ("original" if touched_by_engram_only else "patched"), f.path
        if f.state == "original":
            assert f.blob == f.pristine_blob
