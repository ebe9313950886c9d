"""`imgbuild patches import` and backports on rebase / check --onto, with real git (tests/support/backport_world.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from imgbuild.errors import ApplyError, PatchError, StateError, UpstreamError, UsageError
from imgbuild.patches import backport
from imgbuild.patches.patchfile import parse_header, parse_patch
from imgbuild.project import Project
from imgbuild.workflows import importer, rebase
from imgbuild.workflows.importer import AlreadyUpstream
from imgbuild.workflows.matrix import check_onto
from tests.support.backport_world import FIX_SUBJECT, World, build
from tests.support.jsonschema_check import load_json
from tests.support.rebase_world import snapshot
from tests.support.runner import imgbuild_captured as cli
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


# -- import from a git commit --------------------------------------------------------------
def test_git_commit_becomes_a_backport_with_dep3_header(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    done = importer.import_patch(root, str(world.up.path), rev=world.fix, date=DATE)
    assert done.filename == "0001-core-free-prefix-cache-blocks-on-request-abort.patch"
    assert done.outcome == "offset"  # the fix was made three lines further down than v1 has it
    assert series_names(root) == [done.filename]
    patch = parse_patch(root / "patches" / done.filename)
    f = patch.fields
    assert f["Description"].splitlines()[0] == FIX_SUBJECT
    assert "Host RSS grew linearly" in f["Description"]
    assert f["Author"] == "t <t@example.invalid>"
    assert f["Origin"] == f"upstream, {world.fix}"  # no GitHub remote: the commit id
    assert f["Bug"] == "https://github.com/vllm-project/vllm/pull/44237"
    assert f["Upstream-Status"] == "Backport"
    assert f["Applied-Upstream"] == ""
    assert f["Last-Update"] == DATE and f["Group"] == "backports"
    # rebased onto the pin: the diff's pre-image is v1's file, so it applies exactly there
    v1_blob = git(world.up.path, "rev-parse", "v1:vllm/core/block_pool.py").strip()
    assert patch.files[0].old_blob == v1_blob
    assert patch.files[0].hunks[0].old_start == 17  # v1's line numbers, not main's (+3)
    outcome = Project.load(root).plan(["latest"])[0]
    assert [o.method for o in outcome.outcomes] == ["exact"]
    assert Project.load(root).lint() == []


def test_three_way_from_the_commits_own_blobs(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    done = importer.import_patch(root, str(world.up.path), rev=world.fix2, date=DATE)
    assert done.outcome == "3way"
    text = (root / "patches" / done.filename).read_text()
    assert "-sched 10\n+sched ten\n" in text and " sched 8\n" in text  # v1's context, not main's "sched eight"
    assert "sched eight" not in text


def test_github_remote_gives_commit_url(tmp_path: Path, world: World) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(world.up.path), str(clone))
    git(clone, "remote", "set-url", "origin", "https://github.com/someone/vllm.git")
    root = proj(tmp_path, world)
    done = importer.import_patch(root, str(clone), rev=world.fix, date=DATE, dry_run=True)
    assert f"Origin: upstream, https://github.com/someone/vllm/commit/{world.fix}\n" in done.text
    assert "Bug: https://github.com/someone/vllm/pull/44237\n" in done.text
    assert series_names(root) == []  # dry run writes nothing


# -- import from files -------------------------------------------------------------------------
def test_format_patch_mbox_gives_the_same_diff(tmp_path: Path, world: World) -> None:
    mbox = tmp_path / "fix.patch"
    mbox.write_text(git(world.up.path, "format-patch", "-1", "--stdout", world.fix))
    assert "index " in mbox.read_text() and backport.abbreviated_blobs(mbox.read_text())
    a = importer.import_patch(proj(tmp_path, world), str(mbox), date=DATE, dry_run=True)
    b = importer.import_patch(tmp_path / "p", str(world.up.path), rev=world.fix, date=DATE, dry_run=True)
    diff = a.text[a.text.index("diff --git") :]
    assert diff == b.text[b.text.index("diff --git") :]
    assert a.kind == "mbox" and f"Origin: upstream, https://github.com/vllm-project/vllm/commit/{world.fix}" in a.text
    assert "Signed-off-by" in a.text  # the whole message is the description


def test_mbox_without_original_blobs_cannot_3way(tmp_path: Path, world: World) -> None:
    mbox = tmp_path / "fix2.patch"
    mbox.write_text(git(world.up.path, "format-patch", "-1", "--stdout", world.fix2))
    root = proj(tmp_path, world)
    before = snapshot(root)
    with pytest.raises(ApplyError, match="does not apply to the pinned release v1") as exc:
        importer.import_patch(root, str(mbox), date=DATE)
    assert exc.value.hint is not None and "--rev" in exc.value.hint
    assert snapshot(root) == before


def test_plain_diff_needs_what_the_commit_would_say(tmp_path: Path, world: World) -> None:
    diff = tmp_path / "fix.diff"
    diff.write_text(git(world.up.path, "diff", f"{world.fix}^", world.fix))
    root = proj(tmp_path, world)
    with pytest.raises(UsageError, match="pass --description, --author, --origin"):
        importer.import_patch(root, str(diff))
    o = importer.Overrides(description="Fix the leak\nlonger text", author="A <a@x.invalid>", origin="abc123")
    done = importer.import_patch(root, str(diff), overrides=o, date=DATE)
    f = parse_patch(root / "patches" / done.filename).fields
    assert f["Origin"] == "upstream, abc123" and f["Author"] == "A <a@x.invalid>" and "Bug" not in f
    assert done.filename == "0001-fix-the-leak.patch"


def test_second_import_is_numbered_after_the_series(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    importer.import_patch(root, str(world.up.path), rev=world.fix, date=DATE)
    done = importer.import_patch(root, str(world.up.path), rev=world.fix2, date=DATE, group="sched")
    assert done.filename.startswith("0002-bugfix-sched-10")
    assert [p.group for p in Project.load(root).patches] == ["backports", "sched"]
    with pytest.raises(PatchError, match="already in the series as 0001-"):
        importer.import_patch(root, str(world.up.path), rev=world.fix, date=DATE)


# -- refusals -----------------------------------------------------------------------------------
def test_files_outside_vllm_are_refused(tmp_path: Path, world: World, capsys: pytest.CaptureFixture[str]) -> None:
    root = proj(tmp_path, world)
    before = snapshot(root)
    code, _, err = cli(capsys, "-C", str(root), "patches", "import", str(world.up.path), "--rev", world.tests)
    assert code == 4
    assert "outside vllm/: tests/test_pool.py" in err and "hint:" in err and "-- vllm/" in err
    assert snapshot(root) == before


def test_pin_that_has_the_fix_reports_upstreamed(
    tmp_path: Path, world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    root = proj(tmp_path, world, "v2")
    before = snapshot(root)
    with pytest.raises(AlreadyUpstream, match="upstreamed: the pinned release v2"):
        importer.import_patch(root, str(world.up.path), rev=world.fix)
    code, out, _ = cli(capsys, "-C", str(root), "patches", "import", str(world.up.path), "--rev", world.fix, "--json")
    assert code == 4 and load_json(out)["error"]["outcome"] == "upstreamed"
    assert snapshot(root) == before


def test_bad_rev_and_missing_source(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    with pytest.raises(UsageError, match="'nope' is not a commit"):
        importer.import_patch(root, str(world.up.path), rev="nope")
    with pytest.raises(UsageError, match="no such file, directory or GitHub URL"):
        importer.import_patch(root, str(tmp_path / "missing.patch"))


# -- GitHub URLs -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "patch_url", "bug"),
    [
        (
            "https://github.com/vllm-project/vllm/pull/44237",
            "https://github.com/vllm-project/vllm/pull/44237.patch",
            44237,
        ),
        (
            "github.com/vllm-project/vllm/pull/44237/files",
            "https://github.com/vllm-project/vllm/pull/44237.patch",
            44237,
        ),
        ("https://github.com/o/r/pull/7.patch", "https://github.com/o/r/pull/7.patch", 7),
        (
            "https://github.com/o/r/pull/7/commits/0123abcd",
            "https://github.com/o/r/commit/0123abcd.patch",
            7,
        ),
        ("https://github.com/o/r/commit/0123abcdef?diff=split", "https://github.com/o/r/commit/0123abcdef.patch", None),
    ],
)
def test_github_url_to_patch_url(url: str, patch_url: str, bug: int | None) -> None:
    ref = backport.parse_github_url(url)
    assert ref is not None and ref.patch_url == patch_url and ref.pull == bug


def test_not_github_or_not_a_pr() -> None:
    assert backport.parse_github_url("/tmp/x.patch") is None
    with pytest.raises(UsageError, match="not a GitHub pull request or commit URL"):
        backport.parse_github_url("https://github.com/vllm-project/vllm/issues/1")


def test_unreachable_host_is_one_clear_error() -> None:
    with socket.socket() as s:  # a port nobody listens on: a real refused connection
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UpstreamError, match=f"cannot reach 127.0.0.1:{port} to download") as exc:
        importer.fetch(f"http://127.0.0.1:{port}/vllm-project/vllm/pull/44237.patch", timeout=5)
    assert exc.value.hint is not None and "curl -LO" in exc.value.hint


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
    done = importer.import_patch(root, str(world.up.path), rev=world.fix, date=DATE)
    matrix = check_onto(Project.load(root), ["v2"])
    cell = matrix.to_json()["variants"][0]["results"]["v2"]["patches"][done.filename]  # type: ignore[index]
    assert cell["method"] == "upstreamed" and cell["backport"] is True and cell["applied_upstream"] == "v2"
    result = rebase.start(root, "v2", date=DATE)
    assert [r.outcome for r in result.results] == ["upstreamed"]
    moved = root / "patches" / "upstreamed" / done.filename
    assert not (root / "patches" / done.filename).exists()
    f = parse_patch(moved).fields
    assert f["Applied-Upstream"] == "v2" and f["Upstream-Status"] == "Backport"
    assert f"# upstreamed in v2: {done.filename}" in (root / "patches" / "series").read_text()


def test_rebase_finds_a_fix_changed_again_upstream_by_patch_id(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    done = importer.import_patch(root, str(world.up.path), rev=world.fix, date=DATE)
    stem = done.filename.removesuffix(".patch")
    matrix = check_onto(Project.load(root), ["v3"])
    cell = matrix.cells[("series", "v3", stem)]
    assert cell.outcome == "upstreamed" and world.fix[:12] in cell.reason and "patch-id" in cell.reason
    result = rebase.start(root, "v3", date=DATE)
    assert [r.outcome for r in result.results] == ["upstreamed"]
    assert parse_patch(root / "patches" / "upstreamed" / done.filename).fields["Applied-Upstream"] == "v3"


def test_backport_that_a_later_release_reverts_comes_back_with_applied_upstream_emptied(
    tmp_path: Path, world: World
) -> None:
    root = proj(tmp_path, world)
    done = importer.import_patch(root, str(world.up.path), rev=world.fix, date=DATE)
    original = (root / "patches" / done.filename).read_bytes()
    git(tmp_path, "init", "-q", str(root))  # rebase wants patches/ committed
    git(root, "add", "-A")
    git(root, "commit", "-qm", "import")
    rebase.start(root, "v2", date=DATE)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "onto v2")
    result = rebase.start(root, "v4", date=DATE)
    assert [r.outcome for r in result.results] == ["reinstated"]
    back = root / "patches" / done.filename
    assert parse_patch(back).fields["Applied-Upstream"] == ""
    assert not (root / "patches" / "upstreamed" / done.filename).exists()
    before, after = parse_patch_text(original), parse_patch(back).fields
    assert {k: v for k, v in after.items() if k != "Last-Update"} == {
        k: v for k, v in before.items() if k != "Last-Update"
    }
    assert series_names(root) == [done.filename]


def test_non_backport_conflict_still_stops_the_rebase(tmp_path: Path, world: World) -> None:
    root = proj(tmp_path, world)
    done = importer.import_patch(root, str(world.up.path), rev=world.fix, date=DATE)
    path = root / "patches" / done.filename
    path.write_text(path.read_text().replace("Upstream-Status: Backport", "Upstream-Status: Pending"))
    with pytest.raises(rebase.RebaseStopped):
        rebase.start(root, "v3", date=DATE)
    before = snapshot(root)
    with pytest.raises(StateError, match="a rebase onto v3 is in progress"):  # import waits for the rebase
        importer.import_patch(root, str(world.up.path), rev=world.fix2, date=DATE)
    assert snapshot(root) == before
    rebase.abort(root)


def test_cli_import_json(tmp_path: Path, world: World, capsys: pytest.CaptureFixture[str]) -> None:
    root = proj(tmp_path, world)
    code, out, _ = cli(capsys, "-C", str(root), "patches", "import", str(world.up.path), "--rev", world.fix, "--json")
    data = load_json(out)
    assert code == 0 and data["outcome"] == "offset" and data["written"][0] == f"patches/{data['filename']}"
    code, out, _ = cli(capsys, "-C", str(root), "patches", "list", "--json")
    assert load_json(out)["patches"][0]["group"] == "backports"
