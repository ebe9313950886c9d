"""`imgbuild patches rebase` with real git on a synthetic upstream (tests/support/rebase_world.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from imgbuild.errors import PatchError, StateError, UpstreamError
from imgbuild.patches.patchfile import parse_patch
from imgbuild.project import Project
from imgbuild.workflows import writeback as export
from imgbuild.workflows.rebase import control as rebase
from imgbuild.workflows.rebase import replay as rebase_replay
from imgbuild.workflows.rebase.control import RebaseStopped
from imgbuild.workflows.rebase.review import with_kinds
from imgbuild.workflows.workspace import state_dir
from tests.support.jsonschema_check import load_json
from tests.support.rebase_world import D4, D41, PATCHES, build_upstream, project, snapshot
from tests.support.synth import Upstream, git

DATE = "2027-01-15"
HEX40 = "[0-9a-f]{40}"


@pytest.fixture
def world(upstream: Upstream) -> Upstream:
    return build_upstream(upstream)


def header_without_date(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("Last-Update:"))


def header_of(root: Path, rel: str) -> str:
    return parse_patch(root / "patches" / rel).header


def test_offset_carried_with_context_refreshed_and_header_kept(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"])
    old = (root / "patches" / "0001-cuda-sm121.patch").read_text()
    done = rebase.start(root, "v2", date=DATE)
    assert [r.outcome for r in done.results] == ["offset"]
    new = (root / "patches" / "0001-cuda-sm121.patch").read_text()
    old_header, new_header = old[: old.index("diff --git")], new[: new.index("diff --git")]
    assert header_without_date(old_header) == header_without_date(new_header)
    assert "Last-Update: 2027-01-15\n" in new_header and "Last-Update: 2026-11-01\n" in old_header
    assert "@@ -17,7 +17,7 @@" in old and "@@ -22,7 +22,7 @@" in new  # five lines further down
    index = next(line for line in new.splitlines() if line.startswith("index "))
    assert len(index.split()[1].split("..")[0]) == 40 and len(index.split()[1].split("..")[1]) == 40
    pin = (root / "patches" / "upstream.yaml").read_text()
    commit = git(world.path, "rev-parse", "v2").strip()
    assert "tag: v2" in pin and f"commit: {commit}" in pin
    assert Project.load(root).upstream.commit == commit  # the pin resolves
    report = done.report
    assert report is not None and report.is_file() and "Range-diff" in report.read_text()
    data = json.loads(report.with_suffix(".json").read_text())
    assert data["patches"][0]["outcome"] == "offset"
    assert not state_dir(root, "rebase").exists()


def test_same_commit_rebase_changes_nothing(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, list(PATCHES))
    before = snapshot(root)
    done = rebase.start(root, "v1", date=DATE)
    assert {r.outcome for r in done.results} == {"exact"}
    assert done.written == []
    assert snapshot(root) == before


def test_upstreamed_patch_is_dropped_then_revived_when_reverted(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0002-arch-sm121.patch"])
    original = (root / "patches" / "0002-arch-sm121.patch").read_bytes()
    done = rebase.start(root, "v2", date=DATE)
    assert [r.outcome for r in done.results] == ["offset", "upstreamed"]
    assert not (root / "patches" / "0002-arch-sm121.patch").exists()
    assert (root / "patches" / "upstreamed" / "0002-arch-sm121.patch").read_bytes() == original
    series = (root / "patches" / "series").read_text()
    assert "# upstreamed in v2: 0002-arch-sm121.patch\n" in series
    assert [p.filename for p in Project.load(root).patches] == ["0001-cuda-sm121.patch"]
    report = done.report.read_text() if done.report else ""
    assert "reverse-apply ok, added lines present, patch-id same" in report
    # v3 reverts the change upstream: the patch comes back, byte for byte, in its old place.
    with pytest.raises(RebaseStopped):  # 0001 conflicts on v3 (covered elsewhere); skip it
        rebase.start(root, "v3", date=DATE)
    done = rebase.resume(root, "skip")
    outcomes = {r.filename: r.outcome for r in done.results}
    assert outcomes == {"0001-cuda-sm121.patch": "skipped", "0002-arch-sm121.patch": "reinstated"}
    assert (root / "patches" / "0002-arch-sm121.patch").read_bytes() == original
    assert not (root / "patches" / "upstreamed").exists()
    assert [p.filename for p in Project.load(root).patches] == ["0002-arch-sm121.patch"]


def test_partly_upstreamed_patch_shrinks(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0003-config.patch"])
    done = rebase.start(root, "v2", date=DATE)
    assert done.results[0].outcome == "partly-upstreamed"
    patch = parse_patch(root / "patches" / "0003-config.patch")
    assert [len(f.hunks) for f in patch.files] == [1]
    assert "+cfg ten" in (root / "patches" / "0003-config.patch").read_text()
    assert "cfg fifty" not in (root / "patches" / "0003-config.patch").read_text()
    data = json.loads(done.report.with_suffix(".json").read_text()) if done.report else {}
    dropped = data["patches"][0]["dropped_hunks"]
    assert [(d["path"], d["hunk"]) for d in dropped] == [("vllm/config.py", 2)]


def test_directory_and_file_renames_are_followed(tmp_path: Path, world: Upstream) -> None:
    names = ["0004-engram-disk.patch", "0005-engram-disk-module.patch", "0007-flash-backend.patch"]
    root = project(tmp_path / "p", world, names)
    done = rebase.start(root, "v2", date=DATE)
    assert [r.outcome for r in done.results] == ["exact", "exact", "exact"]
    texts = {n: (root / "patches" / n).read_text() for n in names}
    assert f"diff --git a/{D41}/engram.py b/{D41}/engram.py" in texts[names[0]]
    assert f"+++ b/{D41}/engram_disk.py" in texts[names[1]]  # a created file follows its directory
    assert "diff --git a/vllm/attention/backends/flash.py" in texts[names[2]]
    assert D4 + "/" not in "".join(texts.values())
    report = json.loads(done.report.with_suffix(".json").read_text()) if done.report else {}
    hows = {m["old"]: m["how"] for p in report["patches"] for m in p["moves"]}
    assert hows[f"{D4}/engram_disk.py"] == "directory" and hows["vllm/attention/backend.py"] == "file"
    # The rewritten patches apply exactly where they now point.
    assert Project.load(root).plan()[0].variant.selected


def test_conflict_stops_then_continue(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0003-config.patch"], tag="v2")
    before = snapshot(root)
    with pytest.raises(RebaseStopped) as stopped:
        rebase.start(root, "v3", date=DATE)
    tree = state_dir(root, "rebase") / "tree"
    assert str(tree) in stopped.value.message and "vllm/platforms/cuda.py" in stopped.value.message
    assert "--continue" in (stopped.value.hint or "") and "--abort" in (stopped.value.hint or "")
    marked = (tree / "vllm/platforms/cuda.py").read_text()
    assert "<<<<<<< upstream v3" in marked and ">>>>>>> 0001-cuda-sm121.patch" in marked
    assert snapshot(root) == before  # nothing written yet
    # A second rebase is refused and names the work tree.
    with pytest.raises(StateError, match=str(tree)):
        rebase.start(root, "v3")
    # --continue refuses while markers remain.
    with pytest.raises(StateError, match="conflict markers"):
        rebase.resume(root, "continue")
    resolved = (
        marked.split("<<<<<<<")[0]
        + "cuda 20 upstream style sm121\n"
        + marked.split(">>>>>>> 0001-cuda-sm121.patch\n")[1]
    )
    (tree / "vllm/platforms/cuda.py").write_text(resolved)
    done = rebase.resume(root, "continue")
    assert [r.outcome for r in done.results] == ["resolved", "exact"]
    # The report names what conflicted, not the stop's advice, which resolving made stale.
    assert done.results[0].reason == "conflict resolved by hand: vllm/platforms/cuda.py"
    text = (root / "patches" / "0001-cuda-sm121.patch").read_text()
    assert "-cuda 20 upstream style\n+cuda 20 upstream style sm121\n" in text
    assert (root / "patches" / "0003-config.patch").read_bytes() == before[
        "0003-config.patch"
    ]  # unchanged: not rewritten
    assert "tag: v3" in (root / "patches" / "upstream.yaml").read_text()


def _resolve_cuda_conflict(tree: Path) -> None:
    marked = (tree / "vllm/platforms/cuda.py").read_text()
    resolved = (
        marked.split("<<<<<<<")[0]
        + "cuda 20 upstream style sm121\n"
        + marked.split(">>>>>>> 0001-cuda-sm121.patch\n")[1]
    )
    (tree / "vllm/platforms/cuda.py").write_text(resolved)


def test_a_header_rewritten_at_the_stop_becomes_the_patch_header(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0003-config.patch"], tag="v2")
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3", date=DATE)
    work = state_dir(root, "rebase")
    _resolve_cuda_conflict(work / "tree")
    current = work / "current.patch"
    text = current.read_text()
    # A header without a required field is refused, naming the file and the field; nothing is committed.
    current.write_text(text.replace("Group: ", "Grouping: ", 1))
    with pytest.raises(PatchError, match=r"current\.patch: the header you edited lacks Group"):
        rebase.resume(root, "continue")
    new_description = "Description: SM 12.1 on v3, where upstream took half of it\n"
    edited = re.sub(r"^Description: .*\n", new_description, text, count=1, flags=re.M)
    edited = edited.replace("Group: ", "Applied-Upstream: v3, partly: the cuda 20 line\nGroup: ", 1)
    current.write_text(edited)
    done = rebase.resume(root, "continue")
    assert [r.outcome for r in done.results] == ["resolved", "exact"]
    header = header_of(root, "0001-cuda-sm121.patch")
    assert new_description in header and "Applied-Upstream: v3, partly" in header
    assert "+cuda 20 upstream style sm121\n" in (root / "patches" / "0001-cuda-sm121.patch").read_text()
    report = json.loads(done.report.with_suffix(".json").read_text()) if done.report else {}
    assert with_kinds(report["patches"])[0]["kind"] == "partly-upstreamed"
    md = done.report.read_text() if done.report else ""
    assert "| resolved (partly-upstreamed) |" in md and "Applied upstream: v3, partly: the cuda 20 line" in md


def test_a_header_left_alone_at_the_stop_is_kept(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"], tag="v2")
    before = header_of(root, "0001-cuda-sm121.patch")
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3", date=DATE)
    _resolve_cuda_conflict(state_dir(root, "rebase") / "tree")
    done = rebase.resume(root, "continue")
    assert header_without_date(header_of(root, "0001-cuda-sm121.patch")) == header_without_date(before)
    report = json.loads(done.report.with_suffix(".json").read_text()) if done.report else {}
    assert with_kinds(report["patches"])[0]["kind"] == "resolved"


def test_conflict_with_nothing_changed_asks_for_skip(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"], tag="v2")
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3")
    tree = state_dir(root, "rebase") / "tree"
    git(tree, "checkout", "--", "vllm/platforms/cuda.py")  # back to upstream's version: no change left
    with pytest.raises(StateError, match="no change"):
        rebase.resume(root, "continue")


def test_skip_drops_the_patch_from_the_series_and_keeps_it(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0003-config.patch"], tag="v2")
    before = (root / "patches" / "0001-cuda-sm121.patch").read_bytes()
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3", date=DATE)
    said: list[str] = []
    done = rebase.resume(root, "skip", say=said.append)
    assert [r.outcome for r in done.results] == ["skipped", "exact"]
    assert any("kept in patches/skipped/0001-cuda-sm121.patch" in line for line in said)
    assert not (root / "patches" / "0001-cuda-sm121.patch").exists()
    assert (root / "patches" / "skipped" / "0001-cuda-sm121.patch").read_bytes() == before  # not lost
    series = (root / "patches" / "series").read_text().splitlines()
    assert "# skipped in the rebase onto v3: skipped/0001-cuda-sm121.patch" in series
    assert [e.filename for e in Project.load(root).series] == ["0003-config.patch"]
    assert done.results[0].file == "moved to patches/skipped/0001-cuda-sm121.patch"


def test_abort_restores_everything(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0003-config.patch", "0001-cuda-sm121.patch"], tag="v2")
    before = snapshot(root)
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3")
    assert "aborted" in rebase.abort(root).message
    assert snapshot(root) == before
    assert not state_dir(root, "rebase").exists()
    with pytest.raises(StateError, match="no rebase is in progress"):
        rebase.resume(root, "continue")


def test_a_state_this_imgbuild_cannot_read_is_named(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0003-config.patch", "0001-cuda-sm121.patch"], tag="v2")
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3")
    path = state_dir(root, "rebase") / "state.json"
    data = json.loads(path.read_text())
    del data["ref"]  # as an older imgbuild wrote it
    path.write_text(json.dumps(data))
    assert f"{path} is not a rebase state this imgbuild can read" in (rebase.in_progress_message(root) or "")
    with pytest.raises(StateError) as refused:
        rebase.resume(root, "continue")
    assert (
        "`imgbuild patches rebase --abort`" in refused.value.hint
        and str(state_dir(root, "rebase")) in refused.value.hint
    )


def test_crash_mid_replay_is_detected_and_resumed(
    tmp_path: Path, world: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0003-config.patch", "0002-arch-sm121.patch"])
    real = rebase_replay.carry_patch
    calls = {"n": 0}

    def crashing(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the process dies half-way
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rebase_replay, "carry_patch", crashing)
    with pytest.raises(KeyboardInterrupt):
        rebase.start(root, "v2", date=DATE)
    monkeypatch.setattr(rebase_replay, "carry_patch", real)
    with pytest.raises(StateError, match="interrupted at patch 2 of 3") as refused:
        rebase.start(root, "v2")
    assert str(state_dir(root, "rebase") / "tree") in refused.value.message
    assert "interrupted" in (rebase.in_progress_message(root) or "")
    done = rebase.resume(root, "continue")
    assert [r.outcome for r in done.results] == ["offset", "partly-upstreamed", "upstreamed"]


@pytest.mark.parametrize("finish", ["abort", "continue"])
def test_crash_while_writing_patches_then_abort_or_continue(
    tmp_path: Path, world: Upstream, monkeypatch: pytest.MonkeyPatch, finish: str
) -> None:
    root = project(tmp_path / finish, world, ["0001-cuda-sm121.patch", "0002-arch-sm121.patch"])
    before = snapshot(root)
    real = os.replace
    calls = {"n": 0}

    def crashing(src: str | Path, dst: str | Path) -> None:
        if "staged" in str(src):
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt  # the process dies between two renames
        real(src, dst)

    monkeypatch.setattr(export.os, "replace", crashing)
    with pytest.raises(KeyboardInterrupt):
        rebase.start(root, "v2", date=DATE)
    monkeypatch.setattr(export.os, "replace", real)
    assert snapshot(root) != before  # half written
    assert "while writing patches/" in (rebase.in_progress_message(root) or "")
    if finish == "abort":
        rebase.abort(root)
        assert snapshot(root) == before
    else:
        rebase.resume(root, "continue")
        assert (root / "patches" / "upstreamed" / "0002-arch-sm121.patch").is_file()
        assert "tag: v2" in (root / "patches" / "upstream.yaml").read_text()
        assert [p.filename for p in Project.load(root).patches] == ["0001-cuda-sm121.patch"]
    assert not state_dir(root, "rebase").exists()


def test_bad_ref_and_unreachable_upstream(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"])
    assert Project.load(root).upstream.commit  # only the pinned v1 is in the cache now
    world.path.rename(tmp_path / "gone")  # offline: the upstream is unreachable
    with pytest.raises(UpstreamError, match="cannot fetch 'v2'"):
        rebase.start(root, "v2")
    assert not state_dir(root, "rebase").exists()
    (tmp_path / "gone").rename(world.path)
    with pytest.raises(UpstreamError, match="'v9' is not a tag or commit"):
        rebase.start(root, "v9")
    assert not state_dir(root, "rebase").exists()


def test_foreign_or_replaced_work_tree_is_refused(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"], tag="v2")
    foreign = state_dir(root, "rebase")
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    for action in (
        lambda: rebase.start(root, "v3"),
        lambda: rebase.abort(root),
        lambda: rebase.resume(root, "continue"),
    ):
        with pytest.raises(StateError, match="not made by"):
            action()
    assert (foreign / "notes.txt").read_text() == "mine"
    (foreign / "notes.txt").unlink()
    foreign.rmdir()
    # A work tree swapped for another repository is refused too.
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3")
    tree = foreign / "tree"
    shutil.rmtree(tree)
    git(tree.parent, "init", "-q", "tree")
    with pytest.raises(StateError, match="foreign or replaced"):
        rebase.resume(root, "continue")


def test_dirty_patches_dir_is_refused(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"])
    git(root, "init", "-q")
    git(root, "add", "-A", "patches", "images")
    git(root, "commit", "-q", "-m", "init")
    (root / "patches" / "series").write_text((root / "patches" / "series").read_text() + "# wip\n")
    with pytest.raises(StateError, match="uncommitted changes"):
        rebase.start(root, "v2")


def test_patches_changed_during_rebase_are_not_overwritten(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"], tag="v2")
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3")
    (root / "patches" / "series").write_text((root / "patches" / "series").read_text() + "# edited meanwhile\n")
    with pytest.raises(StateError, match="patches/series changed"):
        rebase.resume(root, "skip")
    assert "# edited meanwhile" in (root / "patches" / "series").read_text()


def test_engram_overlap_is_warned_in_the_report(tmp_path: Path, world: Upstream) -> None:
    names = ["0004-engram-disk.patch", "0006-sm121-engram-guard.patch"]
    root = project(tmp_path / "p", world, names, variants=True)
    done = rebase.start(root, "v2", date=DATE)
    assert [r.outcome for r in done.results] == ["exact", "exact"]
    assert any("engram-mem" in w and "0006-sm121-engram-guard" in w for w in done.warnings)
    assert header_of(root, names[1]).startswith("Description: change 0006")


def test_cli_rebase_round_trip(tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.runner import imgbuild_captured as cli

    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"], tag="v2")
    code, out, err = cli(capsys, "-C", str(root), "patches", "rebase", "--onto", "v3", "--json")
    assert code == 5 and load_json(out)["error"]["stopped"]["filename"] == "0001-cuda-sm121.patch"
    assert "work tree:" in err and "hint:" in err
    code, out, _ = cli(capsys, "-C", str(root), "patches", "rebase")
    assert code == 0 and "stopped at 0001-cuda-sm121.patch" in out
    code, out, _ = cli(capsys, "-C", str(root), "patches", "rebase", "--skip", "--json")
    assert code == 0 and load_json(out)["patches"][0]["outcome"] == "skipped"
    code, _, err = cli(capsys, "-C", str(root), "patches", "rebase", "--continue")
    assert code == 10 and "no rebase is in progress" in err


def test_clean_three_way_merge_is_carried_and_deleted_file_stops(tmp_path: Path, upstream: Upstream) -> None:
    from tests.support.rebase_world import edit
    from tests.support.synth import make_project, numbered

    base = numbered(40)
    upstream.release("v1", {"vllm/a.py": base, "vllm/b.py": numbered(10, "b")})
    upstream.release("v2", {"vllm/a.py": edit(base, "line 22\n", "line 22 upstream\n")})  # inside the hunk's context
    upstream.release("v3", {"vllm/b.py": None})  # deleted, not moved
    diff_a = upstream.diff("v1", {"vllm/a.py": edit(base, "line 20\n", "line 20 patched\n")})
    diff_b = upstream.diff("v1", {"vllm/b.py": edit(numbered(10, "b"), "b 5\n", "b five\n")})
    root = make_project(
        tmp_path / "p", upstream, "v1", [("0001-a.patch", "sm121", diff_a), ("0002-b.patch", "x", diff_b)]
    )
    done = rebase.start(root, "v2", date=DATE)
    assert [r.outcome for r in done.results] == ["3way", "exact"]
    text = (root / "patches" / "0001-a.patch").read_text()
    assert "+line 20 patched\n" in text and " line 22 upstream\n" in text  # context refreshed from v2
    with pytest.raises(RebaseStopped) as stopped:
        rebase.start(root, "v3", date=DATE)
    assert "not applied: vllm/b.py: vllm/b.py does not exist in the tree" in stopped.value.message
    tree = state_dir(root, "rebase") / "tree"
    (tree / "vllm/a.py").write_text((tree / "vllm/a.py").read_text() + "b = 'five'  # ported from b.py\n")
    done = rebase.resume(root, "continue")
    assert [r.outcome for r in done.results] == ["exact", "resolved"]
    assert "+b = 'five'  # ported from b.py" in (root / "patches" / "0002-b.patch").read_text()


# -- work kept: untracked files, edited patches, the state shown, the details in --json -----------
def test_an_untracked_file_in_the_work_tree_is_not_dropped_on_continue(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"], tag="v2")
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3", date=DATE)
    tree = state_dir(root, "rebase") / "tree"
    cuda = tree / "vllm/platforms/cuda.py"
    resolved = [
        ln for ln in cuda.read_text().splitlines(keepends=True) if not ln.startswith(("<<<<<<<", "=======", ">>>>>>>"))
    ]
    cuda.write_text("".join(ln for ln in resolved if ln != "cuda 20 upstream style\n"))
    (tree / "vllm/platforms/sm121.py").write_text("SM = (12, 1)\n")  # new, not `git add`ed
    with pytest.raises(StateError, match=r"not added to git: vllm/platforms/sm121.py") as refused:
        rebase.resume(root, "continue")
    assert refused.value.hint and "git -C" in refused.value.hint
    git(tree, "add", "vllm/platforms/sm121.py")
    done = rebase.resume(root, "continue")
    assert [r.outcome for r in done.results] == ["resolved"]
    assert "+SM = (12, 1)" in (root / "patches" / "0001-cuda-sm121.patch").read_text()  # in the patch


def test_a_patch_edited_while_stopped_is_caught_at_the_next_continue(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0003-config.patch"], tag="v2")
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3", date=DATE)
    later = root / "patches" / "0003-config.patch"
    later.write_text(later.read_text().replace("Description: change", "Description: edited"))
    with pytest.raises(StateError, match=r"patches/0003-config.patch changed since the rebase started") as caught:
        rebase.resume(root, "continue")  # not only after every conflict is resolved
    assert caught.value.hint and "the the" not in caught.value.hint and "abort the rebase" in caught.value.hint
    assert "Description: edited" in later.read_text()  # the edit is kept


def test_patches_status_shows_a_stopped_rebase(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.runner import imgbuild_captured as cli

    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch"], tag="v2")
    with pytest.raises(RebaseStopped):
        rebase.start(root, "v3", date=DATE)
    code, out, _ = cli(capsys, "-C", str(root), "patches", "status")
    assert code == 0 and "stopped at 0001-cuda-sm121.patch" in out and "--continue" in out and "--abort" in out
    code, out, _ = cli(capsys, "-C", str(root), "patches", "status", "--json")
    info = load_json(out)["rebase"]
    assert code == 0 and info["status"] == "stopped" and info["stopped"]["filename"] == "0001-cuda-sm121.patch"


def test_rebase_json_has_moves_dropped_hunks_and_checks(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.runner import imgbuild_captured as cli

    root = project(tmp_path / "p", world, ["0003-config.patch", "0004-engram-disk.patch"])
    code, out, _ = cli(capsys, "-C", str(root), "patches", "rebase", "--onto", "v2", "--json")
    assert code == 0
    rows = {r["patch"]: r for r in load_json(out)["patches"]}
    assert set(rows) == {"0003-config.patch", "0004-engram-disk.patch"}  # one spelling: the file name
    assert rows["0004-engram-disk.patch"]["moves"][0]["new"] == f"{D41}/engram.py"
    config = rows["0003-config.patch"]
    assert config["outcome"] == "partly-upstreamed" and config["dropped_hunks"][0]["path"] == "vllm/config.py"
    assert config["upstreamed_checks"] and config["upstreamed_checks"][0]["reverse_apply"] is True
