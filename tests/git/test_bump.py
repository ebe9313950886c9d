"""`imgbuild patches bump` with real git on the synthetic upstream of tests/support/rebase_world.py
(releases v1, v2, v3; `latest` is v3). The projects are git checkouts; nothing is built (`--no-build`:
tests/docker/test_bump_docker.py builds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgbuild.workflows.workspace import state_dir
from tests.support.jsonschema_check import load_json
from tests.support.rebase_world import D41, build_upstream, project
from tests.support.runner import imgbuild_captured as cli
from tests.support.synth import Upstream, git


@pytest.fixture
def world(upstream: Upstream) -> Upstream:
    return build_upstream(upstream)


def checkout(tmp_path: Path, world: Upstream, names: list[str], tag: str = "v1") -> Path:
    """A project (rebase_world.project) committed on `main` of its own git repository."""
    root = project(tmp_path / "p", world, names, tag=tag)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("/.imgbuild-work/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the project")
    return root


def branch_of(root: Path) -> str:
    return git(root, "symbolic-ref", "--short", "HEAD").strip()


def bump(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, dict[str, object], str]:
    code, out, err = cli(capsys, "-C", str(root), "patches", "bump", "--no-build", "--json", *args)
    return code, json.loads(out), err


def test_clean_carry_commits_the_branch_and_reports_each_patch(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    names = ["0002-arch-sm121.patch", "0003-config.patch", "0004-engram-disk.patch", "0007-flash-backend.patch"]
    root = checkout(tmp_path, world, names)
    code, doc, err = bump(capsys, root)
    assert code == 0, err
    assert doc["status"] == "carried" and doc["ok"] is True and doc["built"] is False
    assert doc["branch"] == "imgbuild/bump-v3" and branch_of(root) == "imgbuild/bump-v3"
    kinds = {p["patch"]: p["kind"] for p in doc["patches"]}  # type: ignore[attr-defined]
    assert kinds == {
        "0002-arch-sm121.patch": "carried",
        "0003-config.patch": "partly-upstreamed",
        "0004-engram-disk.patch": "moved",
        "0007-flash-backend.patch": "moved",
    }
    message = str(doc["message"])
    assert message.startswith("v1 → v3 on branch imgbuild/bump-v3") and "not built (--no-build)" in message
    # the rebased series and the pin are one commit on the branch; main is untouched
    assert git(root, "status", "--porcelain").strip() == ""
    assert git(root, "rev-parse", "HEAD").strip() == doc["commit"]
    assert git(root, "rev-parse", "HEAD~1").strip() == git(root, "rev-parse", "main").strip()
    changed = git(root, "show", "--name-only", "--format=", "HEAD").split()
    assert "patches/upstream.yaml" in changed and "patches/0004-engram-disk.patch" in changed
    assert "tag: v3" in git(root, "show", "HEAD:patches/upstream.yaml")
    assert f"{D41}/engram.py" in git(root, "show", "HEAD:patches/0004-engram-disk.patch")
    assert "tag: v1" in git(root, "show", "main:patches/upstream.yaml")
    # the review report, Markdown and JSON, where --json says
    report = doc["report"]
    assert isinstance(report, dict)
    md, data = Path(report["markdown"]).read_text(), json.loads(Path(report["json"]).read_text())
    assert md.startswith("# Rebase of the patch series: v1 → v3") and message in md and "Range-diff" in md
    assert data["bump"]["status"] == "carried" and data["bump"]["commit"] == doc["commit"]
    rows = {p["filename"]: p for p in data["patches"]}
    assert rows["0004-engram-disk.patch"]["kind"] == "moved" and rows["0004-engram-disk.patch"]["range_diff"]
    assert rows["0003-config.patch"]["dropped_hunks"]


def test_an_upstreamed_patch_is_reported_and_moved(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkout(tmp_path, world, ["0001-cuda-sm121.patch", "0002-arch-sm121.patch"])
    code, doc, err = bump(capsys, root, "--onto", "v2", "--branch", "bump/v2")
    assert code == 0, err
    kinds = {p["patch"]: p["kind"] for p in doc["patches"]}  # type: ignore[attr-defined]
    assert kinds == {"0001-cuda-sm121.patch": "offset", "0002-arch-sm121.patch": "upstreamed"}
    assert branch_of(root) == "bump/v2" and "1 upstreamed" in str(doc["message"])
    files = git(root, "show", "--name-status", "--format=", "HEAD")
    assert "patches/upstreamed/0002-arch-sm121.patch" in files
    assert "# upstreamed in v2: 0002-arch-sm121.patch" in git(root, "show", "HEAD:patches/series")


def test_a_conflict_stops_with_the_per_hunk_report_and_resumes(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkout(tmp_path, world, ["0001-cuda-sm121.patch", "0003-config.patch"], tag="v2")
    code, doc, err = bump(capsys, root, "--report-dir", str(tmp_path / "reports"))
    assert code == 5, err  # the rebase's conflict exit code
    assert doc["status"] == "conflict" and doc["ok"] is False and doc["error"]["exit_code"] == 5  # type: ignore[index]
    assert "stopped at a conflict in 0001-cuda-sm121.patch" in str(doc["message"])
    [hunk] = doc["conflicts"]  # type: ignore[misc]
    assert hunk["file"] == "vllm/platforms/cuda.py" and hunk["hunk"] == 2 and hunk["header"].startswith("@@ -22,7 ")
    sides = hunk["sides"]
    assert "cuda 20" in sides["expected"] and "cuda 20 sm121" in sides["patch"]
    assert "cuda 20 upstream style" in sides["release"] and hunk["release_line"] == 22
    assert hunk["markers"]["ours"] == ["cuda 20 upstream style"] and hunk["markers"]["theirs"] == ["cuda 20 sm121"]
    context = hunk["context"]
    assert context["start"] == 19 and "cuda 19" in context["lines"] and "cuda 21" in context["lines"]
    # the report on disk: JSON and Markdown, with the DEP-3 Description and the commands to resume
    data = json.loads((tmp_path / "reports" / "bump-v3.json").read_text())
    assert data["conflicts"] == doc["conflicts"] and data["status"] == "conflict"
    assert "imgbuild patches rebase --continue" in data["resume"]
    md = (tmp_path / "reports" / "bump-v3.md").read_text()
    assert "change 0001-cuda-sm121.patch" in md and "hunk #2" in md and "imgbuild patches bump" in md
    # the rebase is in progress on the bump's branch: `patches rebase --continue` resumes it
    assert branch_of(root) == "imgbuild/bump-v3" and state_dir(root, "rebase").is_dir()
    code, _, err = cli(capsys, "-C", str(root), "patches", "bump", "--no-build")
    assert code == 10 and "--continue" in err  # a second bump is refused while it is open
    cuda = state_dir(root, "rebase") / "tree" / "vllm/platforms/cuda.py"
    cuda.write_text(cuda.read_text().replace(hunk["markers"]["theirs"][0] + "\n", "").replace(
        "<<<<<<< upstream v3\ncuda 20 upstream style\n=======\n>>>>>>> 0001-cuda-sm121.patch\n",
        "cuda 20 upstream style sm121\n",
    ))  # fmt: skip
    code, _, err = cli(capsys, "-C", str(root), "patches", "rebase", "--continue")
    assert code == 0, err
    code, doc, err = bump(capsys, root, "--report-dir", str(tmp_path / "reports"))
    assert code == 0, err
    assert doc["status"] == "carried" and str(doc["message"]).startswith("v2 → v3 on branch imgbuild/bump-v3")
    assert {p["patch"]: p["kind"] for p in doc["patches"]} == {  # type: ignore[attr-defined]
        "0001-cuda-sm121.patch": "resolved",
        "0003-config.patch": "carried",
    }
    assert git(root, "status", "--porcelain").strip() == ""
    assert "+cuda 20 upstream style sm121" in git(root, "show", "HEAD:patches/0001-cuda-sm121.patch")
    data = json.loads((tmp_path / "reports" / "bump-v3.json").read_text())
    assert data["bump"]["commit"] == doc["commit"] and "conflicts" not in data


def test_at_the_newest_release_nothing_happens(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkout(tmp_path, world, ["0003-config.patch"], tag="v3")
    head = git(root, "rev-parse", "HEAD")
    code, out, err = cli(capsys, "-C", str(root), "patches", "bump")  # would build, were there anything to do
    assert code == 0, err
    assert out.strip() == "already at the newest release v3"
    assert branch_of(root) == "main" and git(root, "rev-parse", "HEAD") == head
    assert git(root, "branch", "--list", "imgbuild/*").strip() == ""
    code, doc, _ = bump(capsys, root)
    assert code == 0 and doc["status"] == "current" and doc["report"] is None


def test_refusals_leave_the_project_as_it_was(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkout(tmp_path, world, ["0001-cuda-sm121.patch"])
    git(root, "branch", "imgbuild/bump-v2")
    code, _, err = cli(capsys, "-C", str(root), "patches", "bump", "--no-build", "--onto", "v2")
    assert code == 10 and "branch imgbuild/bump-v2 already exists" in err
    (root / "patches" / "series").write_text((root / "patches" / "series").read_text() + "# wip\n")
    code, _, err = cli(capsys, "-C", str(root), "patches", "bump", "--no-build", "--onto", "v3")
    assert code == 10 and "uncommitted changes" in err
    assert branch_of(root) == "main" and "imgbuild/bump-v3" not in git(root, "branch")
    git(root, "checkout", "-q", "--", "patches")
    code, _, err = cli(capsys, "-C", str(root), "patches", "bump", "--no-build", "--onto", "v9")
    assert code == 6 and branch_of(root) == "main"  # an unknown release: nothing created


def test_a_rebase_refused_at_its_start_leaves_no_branch(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from imgbuild.errors import ApplyError
    from imgbuild.workflows.rebase import control as rebase

    def refused(*_args: object, **_kwargs: object) -> None:
        raise ApplyError("0001-cuda-sm121.patch does not apply to the pinned release v1")

    monkeypatch.setattr(rebase, "start", refused)
    root = checkout(tmp_path, world, ["0001-cuda-sm121.patch"])
    code, _, err = cli(capsys, "-C", str(root), "patches", "bump", "--no-build", "--onto", "v2")
    assert code == 5 and "does not apply to the pinned release" in err
    assert branch_of(root) == "main" and git(root, "branch", "--list", "imgbuild/*").strip() == ""


def test_a_stop_previews_every_pending_patch_as_check_onto_would(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """At the first stop the author sees the whole job: each pending patch carried in memory (exact, offset,
    3-way, upstreamed or conflicting, with its conflicting hunks), in the terminal, the --json and the report."""
    from tests.support.rebase_world import CONFIG, CUDA, edit, numbered, stack
    from tests.support.synth import make_project

    cuda = numbered(5, "new") + edit(CUDA, "cuda 20\n", "cuda 20 sm121\n")
    steps: list[dict[str, str | None]] = [
        {"vllm/platforms/cuda.py": cuda},
        {"vllm/config.py": edit(edit(CONFIG, "cfg 10\n", "cfg ten\n"), "cfg 50\n", "cfg fifty\n")},
        {"vllm/platforms/cuda.py": edit(cuda, "cuda 21\n", "cuda 21 guard\n")},
    ]
    names = ["0001-cuda-sm121.patch", "0003-config.patch", "0009-cuda-guard.patch"]
    diffs = stack(world, "v2", steps)
    root = make_project(tmp_path / "p", world, "v2", [(n, "sm121", d) for n, d in zip(names, diffs, strict=True)])
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("/.imgbuild-work/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the project")
    expected = cli(capsys, "-C", str(root), "patches", "check", "--onto", "v3", "--json")[1]
    carried = json.loads(expected)["variants"][0]["results"]["v3"]["patches"]
    assert carried["0003-config.patch"]["method"] == "exact"
    assert carried["0009-cuda-guard.patch"]["method"] == "conflict"
    code, doc, err = bump(capsys, root, "--report-dir", str(tmp_path / "reports"))
    assert code == 5, err
    pending = {p["filename"]: p for p in doc["pending"]}  # type: ignore[attr-defined]
    assert list(pending) == ["0003-config.patch", "0009-cuda-guard.patch"]
    assert pending["0003-config.patch"]["outcome"] == "exact"  # as check --onto found it
    guard = pending["0009-cuda-guard.patch"]
    assert guard["kind"] == "conflicting" and guard["conflicting_hunks"][0]["file"] == "vllm/platforms/cuda.py"
    assert guard["summary"].startswith("conflicting: vllm/platforms/cuda.py hunk(s) #1")
    assert "still to carry: 1 exact, 1 conflicting" in str(doc["message"])
    md = (tmp_path / "reports" / "bump-v3.md").read_text()
    assert (
        "## Still to carry" in md and "| `0009-cuda-guard.patch` | pending | conflicting: vllm/platforms/cuda.py" in md
    )
    data = json.loads((tmp_path / "reports" / "bump-v3.json").read_text())
    assert [p["filename"] for p in data["pending"]] == list(pending)
    # the stop as `patches rebase --json` and `patches status --json` show it, then a successful abort's document
    status = load_json(cli(capsys, "-C", str(root), "patches", "rebase", "--json")[1], expect="patches-rebase-status")
    assert status["in_progress"] is True and status["rebase"]["stopped"]["filename"] == "0001-cuda-sm121.patch"
    shown = load_json(cli(capsys, "-C", str(root), "patches", "status", "--json")[1], expect="patches-status")
    assert shown["rebase"]["status"] == "stopped" and "0001-cuda-sm121.patch" in shown["rebase"]["message"]
    code, out, err = cli(capsys, "-C", str(root), "patches", "rebase", "--abort", "--json")
    aborted = load_json(out, expect="patches-rebase-abort")
    assert code == 0 and aborted["ok"] is True and aborted["message"], err
    # `patches rebase` says it in the terminal too
    code, _, err = cli(capsys, "-C", str(root), "patches", "rebase", "--onto", "v3")
    assert code == 5 and "still to carry" in err and "0009-cuda-guard.patch: conflicting" in err, err


def test_a_base_tagged_with_the_old_release_moves_with_the_pin(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path / "p", world, ["0002-arch-sm121.patch"], variants=True)
    latest = root / "images" / "latest.yaml"
    text = latest.read_text()
    # a stock vLLM image carries its release's files: its tag is the pin's
    latest.write_text(text + "image:\n  base: vllm/vllm-openai:v1  # the stock image of the pinned release\n")
    other = root / "images" / "engram-mem.yaml"
    other.write_text(other.read_text() + "image:\n  base: vllm/vllm-openai:v10\n")  # another tag: left alone
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("/.imgbuild-work/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the project")
    code, _, err = bump(capsys, root)
    assert code == 0, err
    assert "  base: vllm/vllm-openai:v3  # the stock image of the pinned release\n" in latest.read_text()
    assert "base: vllm/vllm-openai:v10\n" in other.read_text()
    # in the bump's one commit, with patches/
    changed = git(root, "show", "--name-only", "--format=", "HEAD").split()
    assert "images/latest.yaml" in changed and "images/engram-mem.yaml" not in changed
    assert "images/latest.yaml: image.base moves to the v3 image" in git(root, "log", "-1", "--format=%B")
    assert git(root, "status", "--porcelain").strip() == ""
