"""All git access: commands through `run_git` (the process funnel), objects through gitpython (`GitRepo.repo`)."""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

import git
from git.exc import BadName, GitCommandError, InvalidGitRepositoryError, NoSuchPathError
from gitdb import IStream
from gitdb.exc import BadObject

from imgbuild import proc

SYMLINK_MODE = 0o120000
IDENTITY = {
    "GIT_AUTHOR_NAME": "imgbuild",
    "GIT_AUTHOR_EMAIL": "imgbuild@localhost",
    "GIT_COMMITTER_NAME": "imgbuild",
    "GIT_COMMITTER_EMAIL": "imgbuild@localhost",
}
LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}
DIFF_FLAGS = (
    "--full-index", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
    "--src-prefix=a/", "--dst-prefix=b/", "--diff-algorithm=myers", "--indent-heuristic",
)  # fmt: skip
# What gitpython raises for a name or an id that is not in the repository.
NOT_THERE = (BadName, BadObject, ValueError, GitCommandError)


def blob_id(data: bytes) -> str:
    """The git blob id of `data`, computed without git."""
    header = b"blob %d\0" % len(data)
    return hashlib.sha1(header + data, usedforsecurity=False).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class GitError(Exception):
    """A git command failed; callers turn this into a user-facing error."""


def run_git(
    args: Iterable[str], stdin: bytes | None = None, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> proc.CompletedProcess[bytes]:
    """`git ARGS` with imgbuild's identity; the exit status is the caller's to read."""
    try:
        return proc.run(["git", *args], input=stdin, cwd=cwd, env={**os.environ, **IDENTITY, **(env or {})})
    except proc.ToolNotFound as exc:
        raise GitError("git is not installed (not found on PATH)") from exc


def failed(what: str, done: proc.CompletedProcess[bytes]) -> GitError:
    """`what` failed: the error with git's stderr."""
    return GitError(f"{what} failed: {done.stderr.decode(errors='replace').strip()}")


class GitRepo:
    """One repository: git commands run in it (`run` and the named porcelain), objects read through
    gitpython's Repo (`repo`)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.repo = git.Repo(self.path)
        except (InvalidGitRepositoryError, NoSuchPathError) as exc:
            raise GitError(f"{path} is not a git repository") from exc
        # gitpython reads objects through one `git cat-file` it keeps open: one request at a time
        # (smoke's worker threads read the release too).
        self.lock = threading.RLock()

    @classmethod
    def init_bare(cls, path: Path) -> GitRepo:
        git.Repo.init(path, bare=True)
        repo = cls(path)
        repo.run("config", "gc.auto", "0")
        return repo

    def run(self, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
        """Run one git command in this repository and return its stdout."""
        done = run_git(args, stdin, self.path, env)
        if done.returncode != 0:
            raise failed(f"git {' '.join(args)}", done)
        return done.stdout.decode(errors="surrogateescape")

    def archive(self, commit: str, *paths: str) -> bytes:
        """`git archive` of `commit` (tar), limited to `paths` when given."""
        done = run_git(["archive", "--format=tar", commit, *(["--", *paths] if paths else [])], cwd=self.path)
        if done.returncode != 0:
            raise failed(f"git archive {commit}", done)
        return done.stdout

    # -- objects ---------------------------------------------------------
    def resolve_commit(self, rev: str) -> str | None:
        """Full commit id for `rev`, or None if it does not exist here."""
        with self.lock:
            try:
                sha = str(self.repo.rev_parse(f"{rev}^{{commit}}").hexsha)
            except NOT_THERE:
                return None
        return sha if self.has_object(sha) else None  # a full hex id parses even when the object is absent

    def has_object(self, sha: str) -> bool:
        with self.lock:
            try:
                self.repo.odb.info(bytes.fromhex(sha))
            except NOT_THERE:
                return False
        return True

    def read_blob(self, sha: str) -> bytes:
        with self.lock:
            try:
                return bytes(self.repo.odb.stream(bytes.fromhex(sha)).read())
            except NOT_THERE as exc:
                raise GitError(f"blob {sha} is not in {self.path}") from exc

    def write_blob(self, data: bytes) -> str:
        with self.lock:
            return str(self.repo.odb.store(IStream(b"blob", len(data), io.BytesIO(data))).hexsha.decode())

    # -- named porcelain (what rebase, the patch queue and the image labels ask of a work tree) --
    def verify(self, rev: str) -> str:
        """`rev-parse --verify` of `rev`: the object id; GitError when `rev` does not resolve."""
        return self.run("rev-parse", "--verify", "-q", rev).strip()

    def commit_time(self, commit: str) -> int:
        """The committer date of `commit` in seconds, read from its object."""
        with self.lock:
            try:
                return int(self.repo.commit(commit).committed_date)
            except NOT_THERE as exc:
                raise GitError(f"no commit {commit} in {self.path}") from exc

    def status(self, *paths: str) -> str:
        """`git status --porcelain` of `paths` ('' when they are clean)."""
        return self.run("status", "--porcelain", "--", *paths)

    def stage(self, *paths: str) -> None:
        """`git add -A` of `paths` (new, changed and deleted files alike)."""
        self.run("add", "-A", "--", *paths)


Item = git.Tree | git.Blob | git.Submodule  # an entry of a tree, as gitpython reads it


class CommitTree:
    """Read-only view of one commit, for apply.Tree, through gitpython's trees; a commit never changes, so
    every lookup and content is kept."""

    def __init__(self, repo: GitRepo, commit: str) -> None:
        self.repo = repo
        self.commit = commit
        with repo.lock:
            try:
                self._root: git.Tree = repo.repo.commit(commit).tree
            except NOT_THERE as exc:
                raise GitError(f"{commit} is not a commit in {repo.path}") from exc
        self._items: dict[str, Item | None] = {}
        self._data: dict[str, bytes | None] = {}
        self._dirs: dict[str, dict[str, Item]] = {}

    def item(self, path: str) -> Item | None:
        """The entry at `path`, one directory at a time, each tree read once (gitpython's `tree / path` reads every
        tree on the way down again)."""
        if path not in self._items:
            parent, _, name = path.rpartition("/")
            tree = self._root if not parent else self.item(parent)
            self._items[path] = self._entries(tree).get(name) if isinstance(tree, git.Tree) else None
        return self._items[path]

    def _entries(self, tree: git.Tree) -> dict[str, Item]:
        path = str(tree.path)
        if path not in self._dirs:
            with self.repo.lock:
                try:
                    self._dirs[path] = {str(i.name): i for i in tree}
                except NOT_THERE as exc:
                    raise GitError(f"tree {tree.hexsha} ({path}) of {self.commit} cannot be read") from exc
        return self._dirs[path]

    def read(self, path: str) -> bytes | None:
        if path not in self._data:
            item = self.item(path)
            self._data[path] = self.repo.read_blob(item.hexsha) if isinstance(item, git.Blob) else None
        return self._data[path]

    def prefetch(self, paths: Iterable[str]) -> None:
        """Read the blobs of `paths` now (what `read` would do one at a time later)."""
        for path in paths:
            self.read(path)

    def blob_sha(self, path: str) -> str | None:
        item = self.item(path)
        return str(item.hexsha) if isinstance(item, git.Blob) else None

    def blob(self, sha: str) -> bytes | None:
        return self.repo.read_blob(sha) if self.repo.has_object(sha) else None

    def symlink_prefix(self, path: str) -> str | None:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            item = self.item(prefix)
            if item is None:
                return None
            if item.mode == SYMLINK_MODE:
                return prefix
        return None

    def grep(self, words: Iterable[str], under: str) -> list[str]:
        """Blob paths below `under` whose bytes contain one of `words` (fixed strings), with one `git grep`."""
        args = ["grep", "-l", "-z", "-F", "--no-color", "--no-textconv", "-I"]
        for w in words:
            args += ["-e", w]
        done = run_git([*args, self.commit, "--", under], cwd=self.repo.path)
        if done.returncode == 1:  # nothing matched
            return []
        if done.returncode != 0:
            raise failed(f"git grep in {self.repo.path}", done)
        prefix = f"{self.commit}:"
        names = done.stdout.decode(errors="surrogateescape").split("\0")
        return [n.removeprefix(prefix) for n in names if n]


# -- git without a repository: merges, diffs and patch ids of bytes (carry, backport checks) --
def merge_file(ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """`git merge-file -p`: the merged bytes and the number of conflicts."""
    with tempfile.TemporaryDirectory(prefix="imgbuild-merge-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(tmp) / name
            p.write_bytes(data)
            names.append(str(p))
        done = run_git(["merge-file", "-p", "-L", labels[0], "-L", labels[1], "-L", labels[2], *names])
    if done.returncode < 0 or done.returncode > 127:
        raise failed("git merge-file", done)
    return done.stdout, done.returncode


def diff_no_index(before: bytes, after: bytes, path: str, *, context: int = 3) -> str:
    """A diff of two versions of `path`, made by git without any repository."""
    with tempfile.TemporaryDirectory(prefix="imgbuild-diff-") as tmp:
        for side, data in (("a", before), ("b", after)):
            target = Path(tmp) / side / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        done = run_git(
            ["diff", "--no-index", *DIFF_FLAGS[:5], "--no-prefix", f"-U{context}", f"a/{path}", f"b/{path}"],
            cwd=Path(tmp),
        )
    if done.returncode not in (0, 1):
        raise failed("git diff --no-index", done)
    return done.stdout.decode("utf-8", errors="surrogateescape")


def patch_id(diff: str) -> str | None:
    """`git patch-id --stable` of a diff text (None for an empty diff)."""
    done = run_git(["patch-id", "--stable"], stdin=diff.encode("utf-8", errors="surrogateescape"))
    if done.returncode != 0:
        raise failed("git patch-id", done)
    out = done.stdout.decode().split()
    return out[0] if out else None


def ls_remote_tags(url: str) -> list[str]:
    done = run_git(["ls-remote", "--tags", "--refs", url])
    if done.returncode != 0:
        raise failed(f"git ls-remote {url}", done)
    return [line.split("refs/tags/", 1)[1] for line in done.stdout.decode().splitlines() if "refs/tags/" in line]
