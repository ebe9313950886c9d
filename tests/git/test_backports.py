"""Backports on rebase / check --onto, with real git (tests/support/backport_world.py).

A backport is made as a user does it: `patches edit`, `git cherry-pick` the fix onto the `patches` branch,
its message amended to a DEP-3 header saying `Upstream-Status: Backport`, then `patches refresh`."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.errors import StateError
from imgbuild.patches import backport
from imgbuild.patches.patchfile import parse_header, parse_patch
from imgbuild.project import Project
from imgbuild.shapes import dump
from imgbuild.workflows import queue
from imgbuild.workflows.matrix import check_onto
from imgbuild.workflows.rebase import control as rebase
from tests.support.backport_world import FIX_SUBJECT, World, build
from tests.support.rebase_world import snapshot
from tests.support.synth import git, make_project

DATE = "2026-12-01"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build(tmp_path / "upstream")


def proj(tmp_path: Path, world: World, tag: str = "v1") -> Path:
    return make_project(tmp_path / "p", world.up, tag, [])


def parse_patch_text(data: bytes) -> dict[str, str]:
    return parse_header(data.decode().split("diff --git", 1)[0])


def series_names(root: Path) -> list[str]:
    return [e.filename for e in Project.load(root).series]


def make_backport(root: Path, world: World, commit: str) -> str:
    """Cherry-pick `commit` through `patches edit` / `patches refresh` as a backport; its patch file's name."""
    tree = queue.open_queue(root).work_tree
    git(tree, "fetch", "-q", str(world.up.path), commit)
    git(tree, "cherry-pick", commit)
    header = (
        f"Description: {FIX_SUBJECT}\nAuthor: t <t@example.invalid>\nOrigin: upstream, {commit}\n"
        f"Upstream-Status: Backport\nApplied-Upstream:\nLast-Update: {DATE}\nGroup: backports\n---\n"
    )
    git(tree, "commit", "-q", "--amend", "-m", header)
    done = queue.refresh(root, close=True, date=DATE)
    assert Project.load(root).patches[0].fields["Upstream-Status"] == "Backport"
    return done.added[0]


# -- header helpers ----------------------------------------------------------------------------
def test_applied_upstream_is_filled_and_emptied() -> None:
    text = "Description: x\nUpstream-Status: Backport\nApplied-Upstream:\nGroup: b\n---\ndiff --git a/x b/x\n"
    filled = backport.set_applied_upstream(text, "v0.34.0")
    assert "Applied-Upstream: v0.34.0\nGroup: b\n" in filled and filled.endswith("diff --git a/x b/x\n")
    assert backport.set_applied_upstream(filled, "") == text
    no_field = "Description: x\nUpstream-Status: Backport\n---\ndiff --git a/x b/x\n"
    assert "Upstream-Status: Backport\nApplied-Upstream: v2\n---" in backport.set_applied_upstream(no_field, "v2")


# -- rebase and check --onto recognise backports ---------------------------------------------------
def test_rebase_onto_release_with_the_fix_moves_it_to_upstreamed(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    filename = make_backport(root, world, world.fix)
    matrix = check_onto(Project.load(root), ["v2"])
    cell = dump(matrix.checked())["variants"][0]["results"]["v2"]["patches"][filename]
    assert cell["method"] == "upstreamed" and cell["backport"] is True and cell["applied_upstream"] == "v2"
    result = rebase.start(root, "v2", date=DATE)
    assert [r.outcome for r in result.results] == ["upstreamed"]
    moved = root / "patches" / "upstreamed" / filename
    assert not (root / "patches" / filename).exists()
    f = parse_patch(moved).fields
    assert f["Applied-Upstream"] == "v2" and f["Upstream-Status"] == "Backport"
    assert f"# upstreamed in v2: {filename}" in (root / "patches" / "series").read_text()


def test_rebase_finds_a_fix_changed_again_upstream_by_patch_id(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    filename = make_backport(root, world, world.fix)
    stem = filename.removesuffix(".patch")
    matrix = check_onto(Project.load(root), ["v3"])
    cell = matrix.cells[("series", "v3", stem)]
    assert cell.outcome == "upstreamed" and world.fix[:12] in cell.reason and "patch-id" in cell.reason
    result = rebase.start(root, "v3", date=DATE)
    assert [r.outcome for r in result.results] == ["upstreamed"]
    assert parse_patch(root / "patches" / "upstreamed" / filename).fields["Applied-Upstream"] == "v3"


def test_backport_that_a_later_release_reverts_comes_back_with_applied_upstream_emptied(
    tmp_path: Path, world: World
) -> None:
    root = proj(tmp_path, world)
    filename = make_backport(root, world, world.fix)
    original = (root / "patches" / filename).read_bytes()
    git(tmp_path, "init", "-q", str(root))  # rebase wants patches/ committed
    git(root, "add", "-A")
    git(root, "commit", "-qm", "import")
    rebase.start(root, "v2", date=DATE)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "onto v2")
    result = rebase.start(root, "v4", date=DATE)
    assert [r.outcome for r in result.results] == ["reinstated"]
    back = root / "patches" / filename
    assert parse_patch(back).fields["Applied-Upstream"] == ""
    assert not (root / "patches" / "upstreamed" / filename).exists()
    before, after = parse_patch_text(original), parse_patch(back).fields
    assert {k: v for k, v in after.items() if k != "Last-Update"} == {
        k: v for k, v in before.items() if k != "Last-Update"
    }
    assert series_names(root) == [filename]


def test_non_backport_conflict_still_stops_the_rebase(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    filename = make_backport(root, world, world.fix)
    path = root / "patches" / filename
    path.write_text(path.read_text().replace("Upstream-Status: Backport", "Upstream-Status: Pending"))
    with pytest.raises(rebase.RebaseStopped):
        rebase.start(root, "v3", date=DATE)
    before = snapshot(root)
    with pytest.raises(StateError, match="a rebase is in progress"):  # `patches edit` waits for the rebase
        queue.open_queue(root)
    assert snapshot(root) == before
    rebase.abort(root)
