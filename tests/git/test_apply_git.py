"""The engine against real git: synthetic upstream releases built in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.errors import ApplyError, PatchError, UpstreamError
from imgbuild.patches.apply import apply_patch, apply_stack
from imgbuild.project import Project, merge3
from imgbuild.workflows.checkstack import check_series
from tests.support.jsonschema_check import load_json
from tests.support.runner import imgbuild_here as imgbuild  # in-process: these test the commands, not the process
from tests.support.synth import Upstream, build_on, git, make_project, numbered

BASE = numbered(40)


def edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.fixture
def two_releases(upstream: Upstream) -> Upstream:
    return build_on("engine_git-two_releases", upstream, _two_releases)


def _two_releases(upstream: Upstream) -> Upstream:
    upstream.release("v1", {"vllm/a.py": BASE, "vllm/b.py": numbered(30, "b"), "README": "x\n"})
    # v2 shifts a.py by five lines and changes b.py's context near line 10.
    upstream.release(
        "v2",
        {"vllm/a.py": numbered(5, "new") + BASE, "vllm/b.py": edit(numbered(30, "b"), "b 9\n", "b nine\n")},
    )
    return upstream


def project(tmp_path: Path, up: Upstream, tag: str, patches: list[tuple[str, str, str]], **kw: object) -> Project:
    return Project.load(make_project(tmp_path / "proj", up, tag, patches, **kw))  # type: ignore[arg-type]


def test_exact_then_offset_on_next_release(tmp_path: Path, two_releases: Upstream) -> None:
    diff = two_releases.diff("v1", {"vllm/a.py": edit(BASE, "line 20\n", "line twenty\n")})
    for tag, method, offset in (("v1", "exact", 0), ("v2", "offset", 5)):
        proj = project(tmp_path / tag, two_releases, tag, [("0001-a.patch", "sm12x", diff)])
        res = apply_stack(proj.patches, proj.tree(), merge3=merge3)
        out = res.outcomes[0]
        assert (out.method, out.files[0].hunks[0].offset) == (method, offset)
        assert res.changed["vllm/a.py"].decode().count("line twenty") == 1


def test_conflict_then_3way(tmp_path: Path, two_releases: Upstream) -> None:
    # Context line "b 9" changes in v2: exact/offset fail; the 3-way merge succeeds
    # because the change itself (b 11) does not overlap upstream's (b 9).
    diff = two_releases.diff("v1", {"vllm/b.py": edit(numbered(30, "b"), "b 11\n", "b eleven\n")})
    proj = project(tmp_path, two_releases, "v2", [("0001-b.patch", "sm12x", diff)])
    # Make sure the original blobs exist in the mirror (they do: v1 is fetched with v2 only if present).
    git(proj.upstream.repo.path, "fetch", "-q", two_releases.url, "refs/tags/v1:refs/tags/v1")
    res = apply_stack(proj.patches, proj.tree(), merge3=merge3)
    assert res.outcomes[0].method == "3way"
    text = res.changed["vllm/b.py"].decode()
    assert "b eleven\n" in text and "b nine\n" in text


def test_real_conflict_keeps_markers_and_changes_nothing(tmp_path: Path, two_releases: Upstream) -> None:
    diff = two_releases.diff("v1", {"vllm/b.py": edit(numbered(30, "b"), "b 9\n", "b NINE\n")})
    proj = project(tmp_path, two_releases, "v2", [("0001-b.patch", "sm12x", diff)])
    git(proj.upstream.repo.path, "fetch", "-q", two_releases.url, "refs/tags/v1:refs/tags/v1")
    res = apply_stack(proj.patches, proj.tree(), merge3=merge3)
    assert res.outcomes[0].method == "conflict" and not res.ok
    assert res.changed == {}
    _, own, marked = apply_patch(proj.patches[0], proj.tree(), {}, merge3=merge3)
    assert own == {} and b"<<<<<<< upstream" in marked["vllm/b.py"]


def test_conflict_without_original_blob_says_so(tmp_path: Path, two_releases: Upstream) -> None:
    diff = two_releases.diff("v1", {"vllm/b.py": edit(numbered(30, "b"), "b 9\n", "b NINE\n")})
    v1_blob = git(two_releases.path, "rev-parse", "v1:vllm/b.py").strip()
    diff = diff.replace(f"index {v1_blob}", "index " + "e" * 40)  # written against a blob nobody has
    proj = project(tmp_path, two_releases, "v2", [("0001-b.patch", "sm12x", diff)])
    res = apply_stack(proj.patches, proj.tree(), merge3=merge3)
    assert res.outcomes[0].method == "conflict"
    assert "original blob" in res.outcomes[0].files[0].reason


def test_upstreamed_is_reported_not_silent(tmp_path: Path, upstream: Upstream) -> None:
    upstream.release("v1", {"vllm/a.py": BASE})
    patched = edit(BASE, "line 7\n", "line seven\n")
    diff = upstream.diff("v1", {"vllm/a.py": patched})
    upstream.release("v2", {"vllm/a.py": patched})
    proj = project(tmp_path, upstream, "v2", [("0001-a.patch", "sm12x", diff)])
    res = apply_stack(proj.patches, proj.tree(), merge3=merge3)
    assert res.outcomes[0].method == "upstreamed"
    assert res.changed == {}


def test_partly_upstreamed(tmp_path: Path, upstream: Upstream) -> None:
    upstream.release("v1", {"vllm/a.py": BASE})
    one = edit(BASE, "line 7\n", "line seven\n")
    both = edit(one, "line 30\n", "line thirty\n")
    diff = upstream.diff("v1", {"vllm/a.py": both})
    upstream.release("v2", {"vllm/a.py": one})
    proj = project(tmp_path, upstream, "v2", [("0001-a.patch", "sm12x", diff)])
    res = apply_stack(proj.patches, proj.tree(), merge3=merge3)
    assert res.outcomes[0].method == "partly-upstreamed"
    assert [h.method for h in res.outcomes[0].files[0].hunks] == ["upstreamed", "exact"]
    assert res.changed["vllm/a.py"].decode() == both


def test_rename_patch(tmp_path: Path, upstream: Upstream) -> None:
    upstream.release("v1", {"vllm/old/a.py": BASE})
    git(upstream.path, "mv", "vllm/old", "vllm/new")
    (upstream.path / "vllm/new/a.py").write_text(edit(BASE, "line 3\n", "line three\n"))
    git(upstream.path, "add", "-A")
    diff = git(upstream.path, "diff", "--cached", "--full-index", "-M")
    git(upstream.path, "reset", "-q", "--hard")
    assert "rename from vllm/old/a.py" in diff
    proj = project(tmp_path, upstream, "v1", [("0001-mv.patch", "sm12x", diff)])
    res = apply_stack(proj.patches, proj.tree(), merge3=merge3)
    assert res.ok and res.outcomes[0].method == "exact"
    assert res.changed["vllm/old/a.py"] is None and b"line three" in (res.changed["vllm/new/a.py"] or b"")


def test_symlink_in_tree_is_not_followed(tmp_path: Path, upstream: Upstream) -> None:
    upstream.release("v1", {"vllm/a.py": BASE})
    (upstream.path / "vllm" / "ext").symlink_to("/etc")
    git(upstream.path, "add", "-A")
    git(upstream.path, "commit", "-qm", "link")
    git(upstream.path, "tag", "v2")
    diff = (
        "diff --git a/vllm/ext/hosts b/vllm/ext/hosts\n"
        f"index {'1' * 40}..{'2' * 40} 100644\n--- a/vllm/ext/hosts\n+++ b/vllm/ext/hosts\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    )
    proj = project(tmp_path, upstream, "v2", [("0001-ln.patch", "sm12x", diff)])
    res = apply_stack(proj.patches, proj.tree(), merge3=merge3)
    assert res.outcomes[0].method == "conflict"
    assert "vllm/ext is a symlink" in res.outcomes[0].files[0].reason


def test_group_revert_gives_pristine_files_and_overlap_fails_clearly(tmp_path: Path, upstream: Upstream) -> None:
    upstream.release("v1", {"vllm/a.py": BASE, "vllm/e.py": numbered(20, "e")})
    attn = upstream.diff("v1", {"vllm/a.py": edit(BASE, "line 3\n", "line three\n")})
    engram = upstream.diff("v1", {"vllm/e.py": edit(numbered(20, "e"), "e 5\n", "e five\n")})
    variants = {"latest": {"name": "latest"}, "mem": {"name": "mem", "from": "latest", "revert": ["engram"]}}
    proj = project(
        tmp_path,
        upstream,
        "v1",
        [("0001-a.patch", "sm12x", attn), ("0002-e.patch", "engram", engram)],
        variants=variants,
    )
    latest, mem = proj.plan(["latest", "mem"])
    assert {f.path: f.state for f in latest.files} == {"vllm/a.py": "patched", "vllm/e.py": "patched"}
    states = {f.path: f for f in mem.files}
    assert states["vllm/a.py"].state == "patched" and states["vllm/e.py"].state == "original"
    assert states["vllm/e.py"].blob == states["vllm/e.py"].pristine_blob
    assert states["vllm/e.py"].sha256 == latest.files[1].pristine_sha256

    # A kept patch that needs the reverted one's lines: refuse, naming both.
    on_top = edit(edit(BASE, "line 3\n", "line three\n"), "line three\n", "line THREE\n")
    dep_diff = upstream.diff(
        "v1", {"vllm/a.py": on_top}, on_top_of={"vllm/a.py": edit(BASE, "line 3\n", "line three\n")}
    )
    proj2 = project(
        tmp_path / "two",
        upstream,
        "v1",
        [("0001-a.patch", "engram", attn), ("0002-b.patch", "sm12x", dep_diff)],
        variants=variants,
    )
    with pytest.raises(ApplyError, match=r"kept patch 0002-b does not apply without the left-out 0001-a") as refused:
        proj2.plan(["mem"])
    # `patches check` derives the selections without planning files: the same verdicts, the same words
    for proj_, bad in ((proj, {}), (proj2, {"mem": refused.value.message})):
        checked = check_series(proj_)
        assert checked.variant_errors == bad and checked.ok != bool(bad)
        assert {n: v.selected for n, v in checked.variants.items()} == {
            n: v.selected for n, v in proj_.variants.items() if n not in bad
        }


def test_pin_mismatch_is_an_error(tmp_path: Path, two_releases: Upstream) -> None:
    root = make_project(tmp_path / "p", two_releases, "v1", [])
    pin = (root / "patches/upstream.yaml").read_text()
    v2 = git(two_releases.path, "rev-parse", "v2").strip()
    v1 = git(two_releases.path, "rev-parse", "v1").strip()
    (root / "patches/upstream.yaml").write_text(pin.replace(v1, v2))
    with pytest.raises(UpstreamError, match=rf"tag v1 resolves to {v1}, but patches/upstream.yaml pins {v2}"):
        Project.load(root).tree()


def test_offline_after_first_fetch(tmp_path: Path, two_releases: Upstream) -> None:
    root = make_project(tmp_path / "p", two_releases, "v1", [])
    Project.load(root).tree()
    moved = two_releases.path.rename(tmp_path / "gone")
    assert not two_releases.path.exists() and moved.exists()
    assert Project.load(root).tree().read("vllm/a.py") == BASE.encode()


def test_unreachable_upstream_is_a_clear_error(tmp_path: Path, two_releases: Upstream) -> None:
    root = make_project(tmp_path / "p", two_releases, "v1", [])
    two_releases.path.rename(tmp_path / "gone")
    with pytest.raises(UpstreamError, match="cannot fetch 'v1'") as err:
        Project.load(root).tree()
    assert err.value.hint and "offline" in err.value.hint


def test_broken_cache_mirror_is_rebuilt(tmp_path: Path, two_releases: Upstream) -> None:
    root = make_project(tmp_path / "p", two_releases, "v1", [])
    mirror = Project.load(root).upstream.repo.path
    for child in mirror.iterdir():
        if child.is_dir():
            import shutil

            shutil.rmtree(child)
        else:
            child.unlink()
    assert Project.load(root).tree().read("vllm/a.py") == BASE.encode()


def test_patch_outside_root_refused_via_project(tmp_path: Path, two_releases: Upstream) -> None:
    diff = two_releases.diff("v1", {"README": "y\n"})
    with pytest.raises(PatchError, match=r"0001-r.patch:9: 'README' is outside the package root vllm/"):
        project(tmp_path, two_releases, "v1", [("0001-r.patch", "sm12x", diff)])


def test_cli_check_and_apply_into(tmp_path: Path, two_releases: Upstream) -> None:
    diff = two_releases.diff("v1", {"vllm/a.py": edit(BASE, "line 20\n", "line twenty\n")})
    root = make_project(tmp_path / "p", two_releases, "v2", [("0001-a.patch", "sm12x", diff)])
    check = imgbuild(root, "patches", "check", "--json")
    assert check.returncode == 0, check.stderr

    data = load_json(check.stdout)
    assert data["ok"] and data["patches"][0]["method"] == "offset"
    assert data["patches"][0]["files"][0]["hunks"][0] == {
        "hunk": 1, "header": "@@ -17,7 +17,7 @@", "method": "offset", "offset": 5, "line": 22,
    }  # fmt: skip
    out = tmp_path / "tree"
    res = imgbuild(root, "patches", "apply", "--into", str(out))
    assert res.returncode == 0, res.stderr
    assert "line twenty" in (out / "vllm/a.py").read_text() and (out / "vllm/b.py").exists()
    again = imgbuild(root, "patches", "apply", "--into", str(out))
    assert again.returncode == 10 and "exists and is not empty" in again.stderr


def test_cli_failed_apply_writes_nothing(tmp_path: Path, two_releases: Upstream) -> None:
    good = two_releases.diff("v1", {"vllm/a.py": edit(BASE, "line 20\n", "line twenty\n")})
    bad = two_releases.diff("v1", {"vllm/b.py": edit(numbered(30, "b"), "b 9\n", "b NINE\n")})
    root = make_project(
        tmp_path / "p", two_releases, "v2", [("0001-a.patch", "sm12x", good), ("0002-b.patch", "sm12x", bad)]
    )
    out = tmp_path / "tree"
    res = imgbuild(root, "patches", "apply", "--into", str(out))
    assert res.returncode == 5
    assert "0002-b does not apply" in res.stderr
    assert not out.exists() and not list(tmp_path.glob(".tree*staging*"))
    check = imgbuild(root, "patches", "check")
    assert check.returncode == 1 and "conflict" in check.stdout


def test_allow_fuzz_refused_in_ci(tmp_path: Path, two_releases: Upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path / "p", two_releases, "v1", [])
    monkeypatch.setenv("CI", "true")
    res = imgbuild(root, "patches", "check", "--allow-fuzz", "1")
    assert res.returncode == 2 and "refused in CI" in res.stderr


def test_interrupted_apply_leaves_no_trace(
    tmp_path: Path, two_releases: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imgbuild.workflows import materialize

    diff = two_releases.diff("v1", {"vllm/a.py": edit(BASE, "line 20\n", "line twenty\n")})
    proj = project(tmp_path, two_releases, "v1", [("0001-a.patch", "sm12x", diff)])
    res = apply_stack(proj.patches, proj.tree())
    mirror_refs = git(proj.upstream.repo.path, "show-ref")

    def interrupted(_self: Path, _data: bytes) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", interrupted)
    dest = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        materialize.write_tree(dest, proj.upstream.repo, proj.upstream.commit, res.changed)
    assert not dest.exists()
    assert [p.name for p in tmp_path.iterdir() if "staging" in p.name] == []
    assert git(proj.upstream.repo.path, "show-ref") == mirror_refs
    assert git(proj.upstream.repo.path, "fsck", "--no-dangling") == ""
