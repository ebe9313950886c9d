"""`patches status` tells of an open `patches edit` work tree and of patch files changed (issue 44: it said
nothing of either), in text and --json."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.jsonschema_check import load_json
from tests.support.runner import imgbuild_here as imgbuild
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release

NO_DAEMON = "unix:///nonexistent/docker.sock"


@pytest.fixture
def root(tmp_path: Path, upstream: Upstream) -> Path:
    release(upstream)
    project = engram_project(tmp_path / "p", upstream, "vllm-dsv41")
    env = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".gitignore").write_text(".imgbuild-work/\n")
    subprocess.run(["git", "-C", str(project), "add", "-A"], check=True)
    subprocess.run(["git", *env, "-C", str(project), "commit", "-qm", "x"], check=True)
    return project


def status(root: Path) -> tuple[dict[str, object], str]:
    done = imgbuild(root, "patches", "status", "--json", DOCKER_HOST=NO_DAEMON)
    assert done.returncode == 0, done.stderr
    text = imgbuild(root, "patches", "status", DOCKER_HOST=NO_DAEMON)
    assert text.returncode == 0, text.stderr
    return load_json(done.stdout, expect="patches-status"), text.stdout


def test_status_names_an_open_edit_tree_and_modified_patch_files(root: Path) -> None:
    doc, text = status(root)
    assert doc["edit"] is None and doc["modified"] == [] and "edit:" not in text and "modified:" not in text
    opened = imgbuild(root, "patches", "edit", "--json", DOCKER_HOST=NO_DAEMON)
    assert opened.returncode == 0, opened.stderr
    tree = str(load_json(opened.stdout)["work_tree"])
    doc, text = status(root)
    edit = doc["edit"]
    assert isinstance(edit, dict) and edit["tree"] == tree and edit["unrefreshed"] is False
    assert edit["changed_since_opened"] == [] and f"open at {tree} (nothing to refresh)" in text, text
    # work in the tree, and a patch file changed beside it
    (Path(tree) / "new-file.txt").write_text("x\n")
    patch = sorted((root / "patches").glob("*.patch"))[0]
    patch.write_text(patch.read_text() + "\n")
    doc, text = status(root)
    edit = doc["edit"]
    name = f"patches/{patch.name}"
    assert isinstance(edit, dict) and edit["unrefreshed"] is True and edit["changed_since_opened"] == [name]
    assert doc["modified"] == [name]
    flat = " ".join(text.split())
    assert "(work not in patches/ yet)" in flat and f"changed in patches/ since it was opened: {name}" in flat, text
    assert f"modified: {name} (not committed)" in flat, text
