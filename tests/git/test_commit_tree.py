"""CommitTree, the read-only view of one commit, and GitRepo's object reads, on a real repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.upstream.git import CommitTree, GitError, GitRepo
from tests.support.synth import git

FILES = {
    "vllm/a.py": b"a = 1\n",
    "vllm/same_as_a.py": b"a = 1\n",  # one blob, two paths
    "vllm/sub/deep/b.py": b"b = 2\n" * 1000,
    "vllm/empty.py": b"",
    "vllm/bin.dat": bytes(range(256)) * 10,
}


def make_repo(path: Path) -> tuple[GitRepo, str]:
    git(path.parent, "init", "-q", str(path))
    for name, data in FILES.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    (path / "vllm" / "link").symlink_to("sub")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "files")
    return GitRepo(path), git(path, "rev-parse", "HEAD").strip()


def test_prefetch_reads_what_read_reads(tmp_path: Path) -> None:
    repo, commit = make_repo(tmp_path / "r")
    asked = [*FILES, "vllm/missing.py", "vllm/sub", "vllm/sub/deep/nope.py", "vllm/a.py/x", "vllm/link"]
    one_by_one = CommitTree(repo, commit)
    expected = {p: one_by_one.read(p) for p in asked}
    assert expected["vllm/sub/deep/b.py"] == FILES["vllm/sub/deep/b.py"] and expected["vllm/missing.py"] is None
    assert expected["vllm/sub"] is None and expected["vllm/a.py/x"] is None
    batched = CommitTree(repo, commit)
    batched.prefetch(asked)
    assert {p for p, data in batched._data.items() if data is not None} == set(FILES) | {"vllm/link"}
    assert {p: batched.read(p) for p in asked} == expected


def test_lookups_by_directory(tmp_path: Path) -> None:
    repo, commit = make_repo(tmp_path / "r")
    tree = CommitTree(repo, commit)
    assert tree.symlink_prefix("vllm/link/deep/b.py") == "vllm/link"
    assert tree.symlink_prefix("vllm/sub/deep/b.py") is None
    assert tree.blob_sha("vllm/a.py") == tree.blob_sha("vllm/same_as_a.py") is not None
    assert tree.blob_sha("vllm/sub") is None


def test_a_commit_that_is_not_there_is_a_git_error(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path / "r")
    with pytest.raises(GitError, match="is not a commit"):
        CommitTree(repo, "0" * 40)


def test_objects_by_id_or_revision(tmp_path: Path) -> None:
    repo, commit = make_repo(tmp_path / "r")
    git(tmp_path / "r", "tag", "-a", "-m", "annotated", "v1")
    assert repo.resolve_commit("v1") == repo.resolve_commit("refs/tags/v1") == repo.resolve_commit("HEAD") == commit
    assert repo.resolve_commit("no-such-tag") is None
    assert repo.resolve_commit("HEAD\nHEAD") is None
    blob = CommitTree(repo, commit).blob_sha("vllm/a.py")
    assert blob is not None and repo.has_object(blob) and repo.read_blob(blob) == FILES["vllm/a.py"]
    assert not repo.has_object("f" * 40) and not repo.has_object("HEAD")  # ids only, not revisions
    with pytest.raises(GitError, match="is not in"):
        repo.read_blob("f" * 40)


def test_what_is_not_a_repository_is_refused(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path / "r")
    assert not repo.repo.bare
    assert GitRepo.init_bare(tmp_path / "bare.git").repo.bare
    (tmp_path / "plain").mkdir()
    for path in (tmp_path / "plain", tmp_path / "missing"):
        with pytest.raises(GitError, match="is not a git repository"):
            GitRepo(path)


def test_commit_time_is_the_committer_date_git_prints(tmp_path: Path) -> None:
    repo, commit = make_repo(tmp_path / "r")
    assert repo.commit_time(commit) == int(git(repo.path, "show", "-s", "--format=%ct", commit).strip())
    with pytest.raises(GitError, match="no commit"):
        repo.commit_time("0" * 40)
