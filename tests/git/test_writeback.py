"""The pieces of re-export: headers, series and pin edits, the journal, raw hunks, in-process objects."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from imgbuild.config.models import UpstreamPin
from imgbuild.patches.carry import raw_sections
from imgbuild.upstream.commits import commit_files, init_scratch, read_commit
from imgbuild.upstream.git import GitRepo
from imgbuild.workflows.writeback import (
    Journal,
    bump_last_update,
    dormant_markers,
    reorder_series,
    rewrite_pin,
    rewrite_series_lines,
)
from tests.support.synth import Upstream

WHEEL_PIN = """# The one pin of upstream vLLM. `imgbuild patches rebase` rewrites it.
name: vllm
package_root: vllm
tag: v0.33.0
commit: be4b59b014e585450109d11fdd7b1c69cf208c16
source:
  kind: wheel
  project: vllm
  version: 0.33.0
  platform: manylinux_2_28_aarch64
  python_version: "3.12"
  filename: vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl
  sha256: e9e404f52c8494b69bd83fe99fe7ecfa9f6b89fbd156d2a9639c24ea41d6d606
  url: /somewhere/vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl
"""


def test_bump_last_update_touches_only_that_value() -> None:
    header = "Description: x\nLast-Update: 2026-01-01\nGroup: g\n---\n"
    assert bump_last_update(header, "2027-02-03") == header.replace("2026-01-01", "2027-02-03")
    assert bump_last_update("Description: x\n", "2027-02-03") == "Description: x\n"


def test_rewrite_pin_in_place_keeps_comments_and_quoting() -> None:
    import yaml

    pin = UpstreamPin.model_validate(yaml.safe_load(WHEEL_PIN))
    out = rewrite_pin(
        WHEEL_PIN,
        pin,
        {"tag": "v0.32.0", "commit": "7da913892fc0b8734ff88dd84bf085d214809d63"},
        {"version": "0.32.0", "filename": "vllm-0.32.0-x.whl", "sha256": "d" * 64, "url": None},
    )
    assert out.startswith("# The one pin") and 'python_version: "3.12"' in out
    new = UpstreamPin.model_validate(yaml.safe_load(out))
    assert (new.tag, new.commit, new.version) == ("v0.32.0", "7da913892fc0b8734ff88dd84bf085d214809d63", "0.32.0")
    assert new.source.kind == "wheel" and new.source.url is None and new.source.sha256 == "d" * 64
    assert len(out.splitlines()) == len(WHEEL_PIN.splitlines()) - 1


def test_series_edits_keep_every_other_line() -> None:
    text = "# head\n0001-a.patch\n# note\n0002-b.patch -p1\n0003-c.patch\n"
    assert rewrite_series_lines(text, {2: None, 4: "# upstreamed in v2: 0002-b.patch"}) == (
        "# head\n# note\n# upstreamed in v2: 0002-b.patch\n0003-c.patch\n"
    )
    assert dormant_markers("# upstreamed in v2: 0002-b.patch\n") == [(1, "v2", "0002-b.patch")]
    assert reorder_series(text, ["0001-a.patch", "0002-b.patch", "0003-c.patch"]) == text
    assert reorder_series(text, ["0003-c.patch", "0001-a.patch", "0004-d.patch"]) == (
        "# head\n0003-c.patch\n# note\n0001-a.patch\n0004-d.patch\n"
    )
    assert reorder_series("# only\n", ["0001-a.patch"]) == "# only\n0001-a.patch\n"
    assert reorder_series(text, ["0000-z.patch", "0001-a.patch", "0002-b.patch", "0003-c.patch"]).startswith(
        "# head\n0000-z.patch\n0001-a.patch\n"
    )


def test_journal_apply_and_rollback(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "a").write_bytes(b"old a")
    (root / "patches" / "b").write_bytes(b"old b")
    journal = Journal(root, tmp_path / "work")
    journal.write("patches/a", b"new a")
    journal.write("patches/sub/c", b"new c")
    journal.delete("patches/b")
    journal.prepare()
    journal.apply()
    journal.apply()  # idempotent
    assert (root / "patches" / "a").read_bytes() == b"new a" and not (root / "patches" / "b").exists()
    assert (root / "patches" / "sub" / "c").read_bytes() == b"new c"
    loaded = Journal.load(root, tmp_path / "work")
    assert loaded is not None
    loaded.rollback()
    assert (root / "patches" / "a").read_bytes() == b"old a" and (root / "patches" / "b").read_bytes() == b"old b"
    assert not (root / "patches" / "sub").exists()


def test_raw_sections_split_hunks_exactly() -> None:
    raw = (
        "Description: d\n---\n"
        "diff --git a/vllm/x.py b/vllm/x.py\nindex 1..2 100644\n--- a/vllm/x.py\n+++ b/vllm/x.py\n"
        "@@ -1,2 +1,2 @@ def f():\n-a\n+b\n c\n@@ -10 +10 @@\n-y\n+z\n\\ No newline at end of file\n"
        "diff --git a/vllm/y.py b/vllm/y.py\nnew file mode 100644\n--- /dev/null\n+++ b/vllm/y.py\n"
        "@@ -0,0 +1 @@\n+new\n-- \n2.39.5\n"
    )
    sections = raw_sections(raw)
    assert sections == [
        ["@@ -1,2 +1,2 @@ def f():\n-a\n+b\n c\n", "@@ -10 +10 @@\n-y\n+z\n\\ No newline at end of file\n"],
        ["@@ -0,0 +1 @@\n+new\n"],
    ]


def test_in_process_commits_are_valid_git_objects(tmp_path: Path, upstream: Upstream) -> None:
    upstream.release("v1", {"vllm/a.py": "a\n", "vllm/sub/b.py": "b\n", "vllm/tool.sh": "#!/bin/sh\n"})
    subprocess.run(["git", "update-index", "--chmod=+x", "vllm/tool.sh"], cwd=upstream.path, check=True)
    # its own identity: a fresh CI runner has no user.name/user.email (git commit exits 128 without one)
    who = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "commit", "-qm", "x"], cwd=upstream.path, check=True, env={**os.environ, **who})
    base = GitRepo(upstream.path).run("rev-parse", "HEAD").strip()
    repo = init_scratch(tmp_path / "scratch", upstream.path / ".git" / "objects", "token")
    commit = commit_files(
        repo,
        base,
        {"vllm/sub/b.py": None, "vllm/new/c.py": b"c\n", "vllm/tool.sh": b"#!/bin/sh\necho\n", "vllm/a.py": b"A\n"},
        "msg\n",
    )
    assert read_commit(repo, commit).message == "msg\n"
    listing = repo.run("ls-tree", "-r", commit)
    assert "100755 blob" in listing.split("vllm/tool.sh")[0].splitlines()[-1]
    assert "vllm/sub/b.py" not in listing and "vllm/new/c.py" in listing
    fsck = subprocess.run(["git", "fsck", "--strict", "--no-dangling"], cwd=repo.path, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    same = commit_files(repo, base, {}, "empty\n")
    assert repo.run("rev-parse", f"{same}^{{tree}}") == repo.run("rev-parse", f"{base}^{{tree}}")


@pytest.mark.parametrize("ref", ["", " "])
def test_empty_ref_is_refused(ref: str, upstream: Upstream) -> None:
    from imgbuild.errors import UpstreamError
    from imgbuild.upstream.refs import resolve_ref

    pin = UpstreamPin.model_validate({"tag": "v1", "commit": "0" * 40, "source": {"kind": "git", "url": upstream.url}})
    with pytest.raises(UpstreamError, match="empty ref"):
        resolve_ref(pin, ref)
