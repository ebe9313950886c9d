"""`imgbuild patches import` with real git on a synthetic vLLM that has fixes between releases
(tests/support/backport_world.py): a commit of a clone, an mbox, a `diff -ruN` of two release trees; paths and
offsets rewritten against the pin, DEP-3 headers, `upstreamed`, and all or nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from imgbuild.errors import ApplyError, PatchError, UpstreamError
from imgbuild.patches import backport
from imgbuild.patches.patchfile import parse_patch
from imgbuild.project import Project
from imgbuild.workflows.checkstack import check_series
from imgbuild.workflows.importer import Said, Upstreamed, fetch, import_patch
from tests.support.backport_world import FIX_SUBJECT, POOL, World, build, edit
from tests.support.runner import imgbuild
from tests.support.synth import git, make_project, numbered

DATE = "2026-12-04"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build(tmp_path / "upstream")


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "patches").iterdir())}


def test_a_commit_of_a_clone_lands_at_the_pin_with_its_origin(tmp_path: Path, world: World) -> None:
    root = make_project(tmp_path / "p", world.up, "v1", [])
    done = import_patch(root, str(world.up.path), rev=world.fix, date=DATE)
    # on v1 the fix's lines sit 3 lines higher (upstream added 3 header lines before it): an offset, rewritten
    assert (
        done.outcome == "offset"
        and done.kind == "git"
        and done.filename == "0001-core-free-prefix-cache-blocks-on-request-abort.patch"
    )
    assert done.written == [f"patches/{done.filename}", "patches/series"] and done.variants == ["latest"]
    patch = parse_patch(root / "patches" / done.filename)
    assert patch.fields["Origin"] == f"upstream, {world.fix}"
    assert patch.fields["Bug"] == "https://github.com/vllm-project/vllm/pull/44237"
    assert patch.fields["Upstream-Status"] == "Backport" and patch.fields["Forwarded"] == "not-needed"
    assert patch.fields["Description"].startswith(FIX_SUBJECT) and patch.group == "backports"
    assert [f.path for f in patch.files] == ["vllm/core/block_pool.py"]
    check = check_series(Project.load(root))  # the written patch applies exactly: line numbers are the pin's
    assert check.ok and [o.method for o in check.full.outcomes] == ["exact"]
    assert "@@ -17," in (root / "patches" / done.filename).read_text()  # pool 20 is line 20 there, 23 upstream


def test_an_mbox_leaves_out_what_is_not_in_the_image_and_goes_after(tmp_path: Path, world: World) -> None:
    first = world.up.diff("v1", {"vllm/sched.py": edit(world.up.show("v1", "vllm/sched.py"), "sched 3\n", "s3\n")})
    root = make_project(tmp_path / "p", world.up, "v1", [("0001-a.patch", "g", first)])
    mbox = tmp_path / "fix.mbox"
    mbox.write_text(git(world.up.path, "format-patch", "-1", "--stdout", world.tests))
    done = import_patch(root, str(mbox), name="0002-other.patch", after="0001", date=DATE)
    assert done.kind == "mbox" and done.left_out == ["tests/test_pool.py"] and done.after == "0001-a.patch"
    assert (root / "patches" / "series").read_text() == "# test series\n0001-a.patch\n0002-other.patch\n"
    assert [f.path for f in parse_patch(root / "patches" / "0002-other.patch").files] == ["vllm/other.py"]


def test_a_diff_of_two_release_trees_is_rewritten_to_the_package_root(tmp_path: Path, world: World) -> None:
    trees = tmp_path / "trees"
    for side, text in (("vllm-1.0", POOL), ("vllm-1.1", edit(POOL, "pool 30\n", "pool 30\nrelease(blocks)\n"))):
        (trees / side / "vllm" / "core").mkdir(parents=True)
        (trees / side / "vllm" / "core" / "block_pool.py").write_text(text)
    diff = subprocess.run(["diff", "-ruN", "vllm-1.0", "vllm-1.1"], cwd=trees, capture_output=True, text=True).stdout
    (tmp_path / "fix.diff").write_text(diff)
    root = make_project(tmp_path / "p", world.up, "v1", [])
    args = [
        "patches",
        "import",
        str(tmp_path / "fix.diff"),
        "--name",
        "0001-release.patch",
        "--applied-upstream",
        "1.1",
    ]
    refused = imgbuild(root, *args, "--json")  # a plain diff says nothing about the change
    assert refused.returncode == 2 and "pass --description --author --origin" in refused.stdout, refused.stdout
    said = ["-m", "Release blocks on abort", "--author", "A Dev <dev@example.invalid>", "--origin", "vLLM 1.1"]
    shown = imgbuild(root, *args, *said, "--dry-run", "--json")
    assert shown.returncode == 0, shown.stderr
    assert "diff --git a/vllm/core/block_pool.py b/vllm/core/block_pool.py" in shown.stdout
    assert "Applied-Upstream: 1.1" in shown.stdout and "Origin: upstream, vLLM 1.1" in shown.stdout
    assert not (root / "patches" / "0001-release.patch").exists()  # --dry-run writes nothing


def test_upstreamed_conflicts_and_a_broken_series_write_nothing(tmp_path: Path, world: World) -> None:
    v2 = make_project(tmp_path / "v2", world.up, "v2", [])
    before = files_of(v2)
    with pytest.raises(Upstreamed, match="upstreamed"):
        import_patch(v2, str(world.up.path), rev=world.fix, date=DATE)
    assert files_of(v2) == before
    json_doc = imgbuild(v2, "patches", "import", str(world.up.path), "--rev", world.fix, "--json")
    assert json_doc.returncode == 4 and '"outcome": "upstreamed"' in json_doc.stdout

    # a patch after the import whose context the fix changes: the series would break, so nothing is written
    pin_pool = world.up.show("v1", "vllm/core/block_pool.py")
    later = world.up.diff("v1", {"vllm/core/block_pool.py": edit(pin_pool, "pool 30\n", "pool 30 later\n")})
    unrelated = world.up.diff("v1", {"vllm/sched.py": edit(world.up.show("v1", "vllm/sched.py"), "sched 3\n", "x\n")})
    root = make_project(
        tmp_path / "p", world.up, "v1", [("0001-a.patch", "g", unrelated), ("0002-b.patch", "g", later)]
    )
    before = files_of(root)
    with pytest.raises(ApplyError, match="no longer applies") as err:
        import_patch(root, str(world.up.path), rev=world.fix, after="0001-a.patch", date=DATE)
    assert {"patch": "0002-b.patch", "method": "conflict"} in err.value.details["series"]
    assert files_of(root) == before
    # at the end, on top of 0002, the fix's own context has changed: a conflict, nothing written
    with pytest.raises(ApplyError, match="does not apply"):
        import_patch(root, str(world.up.path), rev=world.fix, date=DATE)
    assert files_of(root) == before


def test_sources_that_are_refused(tmp_path: Path, world: World) -> None:
    root = make_project(tmp_path / "p", world.up, "v1", [])
    only_tests = tmp_path / "t.diff"
    only_tests.write_text(world.up.diff("v1", {"tests/test_pool.py": "def test():\n    assert 2\n"}))
    with pytest.raises(PatchError, match="changes no file under vllm/"):
        import_patch(root, str(only_tests), said=Said("Test", "A <a@b.invalid>", "x"))
    with pytest.raises(UpstreamError, match=r"download http://127\.0\.0\.1:9/x\.patch") as err:
        fetch("http://127.0.0.1:9/x.patch", timeout=5)
    assert err.value.hint and "curl -fLO http://127.0.0.1:9/x.patch" in err.value.hint


def test_github_urls_name_their_patch() -> None:
    pr = backport.parse_github_url("https://github.com/vllm-project/vllm/pull/44237/files")
    assert pr is not None and pr.patch_url == "https://github.com/vllm-project/vllm/pull/44237.patch"
    commit = backport.parse_github_url(f"github.com/vllm-project/vllm/commit/{'a' * 40}.diff")
    assert commit is not None and commit.patch_url == f"https://github.com/vllm-project/vllm/commit/{'a' * 40}.patch"
    assert backport.parse_github_url("/tmp/x.patch") is None
    assert backport.rebase_path("vllm-0.34.0/vllm/x/y.py", "vllm") == "vllm/x/y.py"
    assert backport.rebase_path("tests/test_x.py", "vllm") is None
    assert numbered(1) == "line 1\n"
