"""A state dir of `.imgbuild-work/` is removed in one step: a kill part-way leaves it whole or gone, never a
state.json beside half a work tree, which no later command could use or remove (issue 37; the fault tier's
SIGKILL sweep of `patches bump` found it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imgbuild.atomic import write_json
from imgbuild.upstream.git import GitRepo
from imgbuild.workflows import workspace
from imgbuild.workflows.workspace import Session, work_root
from tests.support.synth import git


def made(root: Path, objects: Path, token: str) -> Session:
    session = Session(root, "rebase")

    def fill(_repo: GitRepo, staging: Path) -> None:
        write_json(staging / "state.json", {"kind": "rebase", "token": token})

    session.create(objects, token, fill)
    assert session.read() == {"kind": "rebase", "token": token}
    return session


def test_a_kill_part_way_through_removing_a_state_leaves_it_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = tmp_path / "objects-repo"
    git(tmp_path, "init", "-q", str(objects))
    root = tmp_path / "project"
    root.mkdir()
    session = made(root, objects / ".git" / "objects", "t1")

    def killed_part_way(path: str | Path, *_: Any, **__: Any) -> None:
        (Path(path) / "tree" / ".git" / "config").unlink()  # the marker goes first, then the kill
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(workspace.shutil, "rmtree", killed_part_way)  # the shutil module itself: undone below
        with pytest.raises(KeyboardInterrupt):
            session.remove()
    assert session.read() is None  # gone as a state: the next command starts afresh
    assert len(list(work_root(root).glob(".rebase-removed-*"))) == 1  # what the kill left, aside
    again = made(root, objects / ".git" / "objects", "t2")
    again.remove()
    assert session.read() is None and list(work_root(root).glob(".rebase-*")) == []  # the leftover went too
