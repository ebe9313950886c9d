"""All git access goes through this module.

GitRepo wraps a gitpython Repo. Commands run via `GitRepo.run`, which can echo
them (IMGBUILD_ECHO_GIT=1) so users can see exactly what imgbuild did. Objects
are read through gitpython's object database, which keeps one long-running
`git cat-file --batch` process instead of a process per blob.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import git
from git.exc import BadName, GitCommandError, InvalidGitRepositoryError, NoSuchPathError
from gitdb.exc import BadObject

SYMLINK_MODE = "120000"
EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
IDENTITY = {
    "GIT_AUTHOR_NAME": "imgbuild",
    "GIT_AUTHOR_EMAIL": "imgbuild@localhost",
    "GIT_COMMITTER_NAME": "imgbuild",
    "GIT_COMMITTER_EMAIL": "imgbuild@localhost",
}


def blob_id(data: bytes) -> str:
    """The git blob id of `data`, computed without git."""
    header = b"blob %d\0" % len(data)
    return hashlib.sha1(header + data, usedforsecurity=False).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class GitError(Exception):
    """A git command failed; callers turn this into a user-facing error."""


@dataclass(frozen=True)
class TreeEntry:
    path: str
    mode: str
    kind: str  # "blob" or "tree" or "commit"
    sha: str


def _echo(args: Iterable[str]) -> None:
    if os.environ.get("IMGBUILD_ECHO_GIT"):
        print("+ git " + " ".join(args), file=sys.stderr)


class GitRepo:
    def __init__(self, path: Path) -> None:
        try:
            self.repo = git.Repo(path)
        except (InvalidGitRepositoryError, NoSuchPathError) as exc:
            raise GitError(f"{path} is not a git repository") from exc
        self.path = Path(path)

    @classmethod
    def init_bare(cls, path: Path) -> GitRepo:
        git.Repo.init(path, bare=True)
        repo = cls(path)
        repo.run("config", "gc.auto", "0")
        return repo

    @classmethod
    def init(cls, path: Path) -> GitRepo:
        git.Repo.init(path)
        return cls(path)

    def run(self, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
        """Run one git command in this repository and return its stdout."""
        _echo(args)
        full_env = {**os.environ, **IDENTITY, **(env or {})}
        proc = subprocess.run(
            ["git", *args],
            cwd=self.path,
            input=stdin,
            env=full_env,
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0:
            stderr = proc.stderr.decode(errors="replace").strip()
            raise GitError(f"git {' '.join(args)} failed: {stderr}")
        return proc.stdout.decode(errors="surrogateescape")

    # -- objects ---------------------------------------------------------
    def resolve_commit(self, rev: str) -> str | None:
        """Full commit id for `rev`, or None if it does not exist here."""
        try:
            return str(self.repo.rev_parse(f"{rev}^{{commit}}").hexsha)
        except (BadName, BadObject, ValueError, GitCommandError):
            return None

    def has_object(self, sha: str) -> bool:
        try:
            self.repo.odb.info(bytes.fromhex(sha))
        except (BadObject, BadName, ValueError):
            return False
        except GitCommandError:
            return False
        return True

    def read_blob(self, sha: str) -> bytes:
        try:
            return bytes(self.repo.odb.stream(bytes.fromhex(sha)).read())
        except (BadObject, ValueError) as exc:
            raise GitError(f"blob {sha} is not in {self.path}") from exc

    def write_blob(self, data: bytes) -> str:
        sha = blob_id(data)
        if not self.has_object(sha):
            self.run("hash-object", "-w", "--stdin", stdin=data)
        return sha

    def entry(self, commit: str, path: str) -> TreeEntry | None:
        """The tree entry at `path` in `commit`, or None if absent."""
        out = self.run("ls-tree", "-z", "--full-tree", commit, "--", path)
        for record in out.split("\0"):
            if not record:
                continue
            meta, name = record.split("\t", 1)
            mode, kind, sha = meta.split()
            if name == path:
                return TreeEntry(name, mode, kind, sha)
        return None

    def entries(self, commit: str, paths: Iterable[str]) -> dict[str, TreeEntry]:
        """Tree entries for many paths at once (missing paths are left out)."""
        wanted = sorted(set(paths))
        if not wanted:
            return {}
        out = self.run("ls-tree", "-z", "--full-tree", commit, "--", *wanted)
        found: dict[str, TreeEntry] = {}
        for record in out.split("\0"):
            if record:
                meta, name = record.split("\t", 1)
                mode, kind, sha = meta.split()
                found[name] = TreeEntry(name, mode, kind, sha)
        return found

    def symlink_prefix(self, commit: str, path: str) -> str | None:
        """The first leading component of `path` that is a symlink in `commit`."""
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        found = self.entries(commit, prefixes)
        for prefix in prefixes:
            e = found.get(prefix)
            if e is not None and e.mode == SYMLINK_MODE:
                return prefix
        return None

    def commit_tree(self, base_commit: str, files: Mapping[str, bytes | None], message: str) -> str:
        """A new commit whose tree is base_commit's with `files` replaced.

        Uses a throwaway index so no work tree is touched. `None` deletes a path.
        """
        with tempfile.TemporaryDirectory(prefix="imgbuild-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.run("read-tree", base_commit, env=env)
            lines = []
            for path, data in sorted(files.items()):
                if data is None:
                    lines.append(f"0 {'0' * 40}\t{path}")
                else:
                    lines.append(f"100644 {self.write_blob(data)}\t{path}")
            if lines:
                self.run("update-index", "--index-info", stdin=("\n".join(lines) + "\n").encode(), env=env)
            tree = self.run("write-tree", env=env).strip()
        return self.run("commit-tree", tree, "-p", base_commit, "-m", message).strip()


def merge_file(ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """`git merge-file -p`: the merged bytes and the number of conflicts."""
    with tempfile.TemporaryDirectory(prefix="imgbuild-merge-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(tmp) / name
            p.write_bytes(data)
            names.append(str(p))
        args = ["merge-file", "-p", "-L", labels[0], "-L", labels[1], "-L", labels[2], *names]
        _echo(args)
        proc = subprocess.run(["git", *args], capture_output=True, check=False)
    if proc.returncode < 0 or proc.returncode > 127:
        raise GitError(f"git merge-file failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout, proc.returncode


class CommitTree:
    """Read-only view of one commit, for apply.Tree. Reads via the object db."""

    def __init__(self, repo: GitRepo, commit: str) -> None:
        self.repo = repo
        self.commit = commit
        self._tree = repo.repo.commit(commit).tree

    def _item(self, path: str) -> git.objects.base.IndexObject | None:
        try:
            return self._tree / path
        except KeyError:
            return None

    def read(self, path: str) -> bytes | None:
        item = self._item(path)
        if item is None or item.type != "blob":
            return None
        return bytes(item.data_stream.read())

    def blob_sha(self, path: str) -> str | None:
        item = self._item(path)
        return None if item is None or item.type != "blob" else str(item.hexsha)

    def blob(self, sha: str) -> bytes | None:
        return self.repo.read_blob(sha) if self.repo.has_object(sha) else None

    def symlink_prefix(self, path: str) -> str | None:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            item = self._item(prefix)
            if item is None:
                return None
            if item.mode == 0o120000:
                return prefix
        return None

    def paths(self, under: str) -> list[str]:
        """Every blob path below `under` (used to follow renames)."""
        item = self._item(under)
        if item is None or item.type != "tree":
            return []
        return [str(b.path) for b in item.traverse() if getattr(b, "type", "") == "blob"]
