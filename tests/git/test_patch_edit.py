"""`imgbuild patches edit` / `refresh`: the series as a git branch and back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgbuild.errors import StateError
from imgbuild.patches.patchfile import parse_patch
from imgbuild.project import Project
from imgbuild.upstream.commits import read_commit, rev_list
from imgbuild.upstream.git import GitRepo
from imgbuild.workflows import queue as pq
from imgbuild.workflows.rebase import control as rebase
from imgbuild.workflows.workspace import state_dir
from tests.support.rebase_world import build_upstream, project, snapshot
from tests.support.synth import Upstream, git

NAMES = ["0001-cuda-sm121.patch", "0003-config.patch", "0004-engram-disk.patch"]
DATE = "2027-04-01"


@pytest.fixture
def opened(tmp_path: Path, upstream: Upstream) -> tuple[Path, Path]:
    root = project(tmp_path / "p", build_upstream(upstream), NAMES)
    info = pq.open_queue(root)
    assert info.created and info.commits == 3
    return root, info.work_tree


def commit_all(tree: Path, *args: str) -> None:
    git(tree, "commit", "-q", "-a", *args)


def test_headers_become_commit_messages(opened: tuple[Path, Path]) -> None:
    root, tree = opened
    repo = GitRepo(tree)
    state = json.loads((state_dir(root, "pq") / "state.json").read_text())
    messages = [read_commit(repo, sha).message for sha in rev_list(repo, state["base"], "HEAD")]
    for name, message in zip(NAMES, messages, strict=True):
        header = parse_patch(root / "patches" / name).header
        assert message == f"{header}\nPatch-Name: {name}\n"
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == "patches"
    assert (tree / "vllm/platforms/cuda.py").read_text().count("cuda 20 sm121") == 1
    again = pq.open_queue(root)
    assert not again.created and again.work_tree == tree


def test_refresh_without_changes_rewrites_nothing(opened: tuple[Path, Path]) -> None:
    root, _ = opened
    before = snapshot(root)
    result = pq.refresh(root, date=DATE)
    assert result.written == [] and result.added == [] and result.removed == [] and not result.series_changed
    assert snapshot(root) == before


def test_amend_add_and_edit_header(opened: tuple[Path, Path]) -> None:
    root, tree = opened
    before = snapshot(root)
    # Amend the middle patch's code (interactive-rebase style: edit, then replay the rest).
    base = json.loads((state_dir(root, "pq") / "state.json").read_text())["base"]
    shas = rev_list(GitRepo(tree), base, "HEAD")
    git(tree, "checkout", "-q", "-B", "work", shas[1])
    (tree / "vllm/config.py").write_text((tree / "vllm/config.py").read_text().replace("cfg ten", "cfg TEN"))
    commit_all(tree, "--amend", "--no-edit")
    git(tree, "cherry-pick", shas[2])
    # A new commit becomes a new patch.
    (tree / "vllm/utils/arch.py").write_text((tree / "vllm/utils/arch.py").read_text() + "extra = 1\n")
    commit_all(tree, "-m", "Add an extra knob\n\nWhy it helps.\n\nGroup: sm121")
    result = pq.refresh(root, date=DATE)
    assert result.written == ["0003-config.patch"] and result.added == ["0005-add-an-extra-knob.patch"]
    after = snapshot(root)
    for name in ("0001-cuda-sm121.patch", "0004-engram-disk.patch"):
        assert after[name] == before[name]  # untouched, byte for byte
    old_header = parse_patch(root / "patches" / "0003-config.patch").header
    assert "Last-Update: 2027-04-01" in old_header and "cfg TEN" in after["0003-config.patch"].decode()
    assert before["0003-config.patch"].decode().replace("2026-11-01", DATE).split("diff --git")[0] == old_header
    new = parse_patch(root / "patches" / "0005-add-an-extra-knob.patch")
    assert new.fields["Description"].startswith("Add an extra knob") and new.group == "sm121"
    assert new.fields["Last-Update"] == DATE
    assert (root / "patches" / "series").read_text().splitlines()[-1] == "0005-add-an-extra-knob.patch"
    # The branch now carries the new patch's name, so a second refresh is a no-op.
    assert pq.refresh(root, date="2027-05-05").written == []
    assert snapshot(root) == after
    # Editing a header in the commit message changes the patch's header.
    message = read_commit(GitRepo(tree), git(tree, "rev-parse", "HEAD~1").strip()).message
    git(tree, "checkout", "-q", "HEAD~1")
    git(tree, "commit", "-q", "--amend", "-m", message.replace("Group: engram", "Group: engram-disk"))
    git(tree, "cherry-pick", "work")
    git(tree, "checkout", "-q", "-B", "work")
    result = pq.refresh(root, date=DATE)
    assert result.written == ["0004-engram-disk.patch"]
    assert parse_patch(root / "patches" / "0004-engram-disk.patch").group == "engram-disk"
    assert Project.load(root).patches[2].group == "engram-disk"


def test_dropped_commit_leaves_the_series(opened: tuple[Path, Path]) -> None:
    root, tree = opened
    git(tree, "rebase", "-q", "--onto", "HEAD~2", "HEAD~1")  # drop the middle commit
    result = pq.refresh(root, date=DATE, close=True)
    assert result.removed == ["0003-config.patch"] and result.closed
    assert not (root / "patches" / "0003-config.patch").exists()
    assert [p.filename for p in Project.load(root).patches] == ["0001-cuda-sm121.patch", "0004-engram-disk.patch"]
    assert not state_dir(root, "pq").exists()


def test_dirty_work_tree_and_busy_states_are_refused(opened: tuple[Path, Path]) -> None:
    root, tree = opened
    (tree / "vllm/config.py").write_text("dirty\n")
    with pytest.raises(StateError, match="uncommitted changes"):
        pq.refresh(root)
    with pytest.raises(StateError, match="patches edit"):
        rebase.start(root, "v2")  # a rebase would move the ground under the open work tree
    with pytest.raises(StateError, match="not in patches/ yet"):
        pq.discard(root)
    assert "removed" in pq.discard(root, force=True).message
    assert pq.refresh is not None and not state_dir(root, "pq").exists()


def test_patches_edited_behind_the_work_tree_are_not_overwritten(opened: tuple[Path, Path]) -> None:
    root, tree = opened
    target = root / "patches" / "0001-cuda-sm121.patch"
    target.write_text(target.read_text().replace("Author: Test", "Author: Someone"))
    (tree / "vllm/config.py").write_text((tree / "vllm/config.py").read_text() + "x = 1\n")
    commit_all(tree, "--amend", "--no-edit")
    with pytest.raises(StateError, match=r"0001-cuda-sm121\.patch changed"):
        pq.refresh(root)
    assert "Author: Someone" in target.read_text()


def test_messages_survive_git_cleanup() -> None:
    header = "Description: x\n Longer.\nAuthor: A <a@b>\n# not a comment in DEP-3\nLast-Update: 2026-01-01\n---\n"
    name, back = pq.from_message(pq.to_message(header, "0001-x.patch"))
    assert (name, back) == ("0001-x.patch", header)
    cleaned = "\n".join(line for line in header.splitlines() if not line.startswith("#")) + "\n"
    assert pq.same_header(cleaned + "\n\n", header)
    assert not pq.same_header(header.replace("Longer.", "Shorter."), header)
