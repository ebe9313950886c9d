"""Commit stacks in scratch repositories that borrow the cache's objects (rebase, the patch queue, the import)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from imgbuild.upstream.git import DIFF_FLAGS, LITERAL, CommitTree, GitError, GitRepo, failed, run_git

SCRATCH_MARKER_KEY = "imgbuild.scratch"


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    parents: tuple[str, ...]
    author: str  # "Name <email>"
    message: str  # exactly as stored
    tree: str = ""
    author_date: str = ""  # "seconds +zone"

    def author_env(self) -> dict[str, str]:
        """Environment that makes `git commit-tree` keep this commit's author."""
        name, _, email = self.author.partition(" <")
        return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email.rstrip(">"), "GIT_AUTHOR_DATE": self.author_date}


def init_scratch(path: Path, objects: Path, marker: str) -> GitRepo:
    """A new non-bare repository at `path` borrowing objects from `objects` (alternates)."""
    path.mkdir(parents=True, exist_ok=True)
    done = run_git(["init", "-q", "--template=", str(path)])  # no sample hooks: less to create and remove
    if done.returncode != 0:
        raise failed(f"git init {path}", done)
    repo = GitRepo(path)
    info = Path(repo.repo.git_dir) / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(str(objects.resolve()) + "\n", encoding="utf-8")
    for key, value in ((SCRATCH_MARKER_KEY, marker), ("gc.auto", "0"), ("core.autocrlf", "false")):
        repo.run("config", key, value)
    return GitRepo(path)


def scratch_marker(path: Path) -> str | None:
    """The marker of an imgbuild scratch repository at `path`, or None if it is not one."""
    if not (path / ".git").exists():
        return None
    done = run_git(["config", "--file", str(path / ".git" / "config"), "--get", SCRATCH_MARKER_KEY])
    return (done.stdout.decode().strip() or None) if done.returncode == 0 else None


def commit_raw(
    repo: GitRepo, tree: str, parents: Iterable[str], message: str, env: Mapping[str, str] | None = None
) -> str:
    """A commit with this exact message (no cleanup, unlike `git commit`)."""
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    return repo.run(*args, "-F", "-", stdin=message.encode("utf-8", errors="surrogateescape"), env=env).strip()


def commit_files(repo: GitRepo, base_commit: str, files: Mapping[str, bytes | None], message: str) -> str:
    """A commit on `base_commit` with `files` replaced (None: deleted), made in a temporary index."""
    base = CommitTree(repo, base_commit)
    info = []
    for path, data in files.items():
        if data is None:
            info.append(f"0 {'0' * 40}\t{path}\0")
        else:
            mode = "100755" if getattr(base.item(path), "mode", 0) == 0o100755 else "100644"
            info.append(f"{mode} {repo.write_blob(data)}\t{path}\0")
    with tempfile.TemporaryDirectory(prefix="imgbuild-index-") as tmp:
        env = {**LITERAL, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        repo.run("read-tree", base_commit, env=env)
        repo.run("update-index", "-z", "--index-info", stdin="".join(info).encode(errors="surrogateescape"), env=env)
        tree = repo.run("write-tree", env=env).strip()
    return commit_raw(repo, tree, [base_commit], message)


def read_commit(repo: GitRepo, sha: str) -> CommitInfo:
    raw = repo.run("cat-file", "commit", sha)
    head, _, message = raw.partition("\n\n")
    parents: list[str] = []
    author = date = tree = ""
    for line in head.splitlines():
        if line.startswith("parent "):
            parents.append(line.split()[1])
        elif line.startswith("tree "):
            tree = line.split()[1]
        elif line.startswith("author "):
            author, seconds, zone = line[len("author ") :].rsplit(" ", 2)
            date = f"{seconds} {zone}"
    return CommitInfo(sha, tuple(parents), author, message, tree, date)


def rev_list(repo: GitRepo, base: str, tip: str) -> list[str]:
    """Commits in base..tip, oldest first."""
    return repo.run("rev-list", "--reverse", f"{base}..{tip}").split()


def is_ancestor(repo: GitRepo, ancestor: str, commit: str) -> bool:
    try:
        repo.run("merge-base", "--is-ancestor", ancestor, commit)
    except GitError:
        return False
    return True


def diff_commits(repo: GitRepo, old: str, new: str, *, context: int = 3, paths: Iterable[str] = ()) -> str:
    """`git diff --full-index` between two commits, independent of the user's diff config."""
    return repo.run("diff", *DIFF_FLAGS, f"-U{context}", old, new, "--", *paths, env=LITERAL)


def name_status(
    repo: GitRepo, old: str, new: str, *, renames: bool, paths: Iterable[str] = ()
) -> list[tuple[str, str, str | None]]:
    """(status letter, path, renamed-to path or None) for each changed path."""
    flags = ["-M", "-l100000"] if renames else ["--no-renames"]
    out = repo.run("diff", "--name-status", "-z", *flags, old, new, "--", *paths, env=LITERAL)
    fields = iter(out.split("\0"))  # STATUS, PATH (and TO for a rename or a copy), ..., then ''
    result: list[tuple[str, str, str | None]] = []
    for status in fields:
        if not status:
            break
        result.append((status[0], next(fields), next(fields) if status[0] in "RC" else None))
    return result


def status_porcelain(repo: GitRepo) -> list[str]:
    return [line for line in repo.run("status", "--porcelain", "--untracked-files=all").splitlines() if line]


def checkout_branch(repo: GitRepo, branch: str, commit: str) -> None:
    """Point `branch` at `commit`, make it HEAD, and reset the index and work tree to it."""
    repo.run("update-ref", f"refs/heads/{branch}", commit)
    repo.run("symbolic-ref", "HEAD", f"refs/heads/{branch}")
    repo.run("reset", "--hard", "-q", commit)
