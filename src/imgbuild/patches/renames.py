"""Follow files that moved between two releases: git's rename detection limited to the files that matter, and
directory renames inferred as `git merge` does."""

from __future__ import annotations

import dataclasses
import posixpath
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePosixPath

import git

from imgbuild.patches.patchfile import FileDiff, Patch
from imgbuild.shapes import named
from imgbuild.upstream.commits import name_status
from imgbuild.upstream.git import CommitTree, GitError, GitRepo

MAX_SOURCES = 400
MAX_CANDIDATES = 2000


@named("RenameMove")
@dataclass(frozen=True)
class FileMove:
    """A file the patch changes that the release moved: `how` is file (git's rename detection) or directory."""

    # (`patches rebase` and `check --onto` carry the patch to the new path)

    old: str
    new: str
    how: str  # "file" (git rename detection) or "directory" (inferred directory rename)


def _parents(path: str) -> list[str]:
    """Ancestor directories of `path`, deepest first."""
    return [str(d) for d in PurePosixPath(path).parents[:-1]]


def _is_dir(tree: CommitTree, path: str) -> bool:
    return bool(path) and isinstance(tree.item(path), git.Tree)


def _dir_pair(old: str, new: str) -> tuple[str, str] | None:
    """For a move old -> new, the directories that differ once the common tail is removed."""
    a, b = old.split("/"), new.split("/")
    tail = 0
    while tail < min(len(a), len(b)) - 1 and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    if tail == 0:
        return None
    da, db = "/".join(a[:-tail]), "/".join(b[:-tail])
    return (da, db) if da != db and da and db else None


class RenameFinder:
    """Moves between commit `old` and commit `new`, both in `repo`."""

    def __init__(self, repo: GitRepo, old: str, new: str) -> None:
        self.repo = repo
        self.old = old
        self.new = new
        self.new_tree = CommitTree(repo, new)
        self.files: dict[str, str] = {}
        self.dir_votes: dict[str, Counter[str]] = {}
        self._changes: list[tuple[str, str, str | None]] | None = None
        self._searched: set[str] = set()

    @cached_property
    def old_tree(self) -> CommitTree:
        return CommitTree(self.repo, self.old)

    def _search(self, path: str) -> None:
        """Run rename detection for the files around `path` (once per vanished directory)."""
        old, old_tree = self.old, self.old_tree
        top = posixpath.dirname(path)
        for d in _parents(path):
            if _is_dir(self.new_tree, d):
                break
            top = d
        if top in self._searched:
            return
        self._searched.add(top)
        if self._changes is None:
            try:
                self._changes = name_status(self.repo, old, self.new, renames=False)
            except GitError:
                self._changes = []
        prefix = top + "/" if top else ""
        sources = [p for s, p, _ in self._changes if s == "D" and p.startswith(prefix)]
        if old_tree.blob_sha(path) is not None and path not in sources:
            sources.append(path)
        sources = sorted(sources, key=lambda p: (p != path, p))[:MAX_SOURCES]
        names = {posixpath.basename(p) for p in sources}
        added = [p for s, p, _ in self._changes if s == "A"]
        candidates = [
            p for p in added if posixpath.basename(p) in names or posixpath.dirname(p) == posixpath.dirname(path)
        ]
        if len(candidates) < MAX_CANDIDATES and len(added) <= MAX_CANDIDATES:
            candidates = added
        if not sources or not candidates:
            return
        try:
            moves = name_status(self.repo, old, self.new, renames=True, paths=[*sources, *candidates[:MAX_CANDIDATES]])
        except GitError:
            return
        for status, src, dst in moves:
            if status == "R" and dst:
                self.files[src] = dst
                pair = _dir_pair(src, dst)
                if pair:
                    self.dir_votes.setdefault(pair[0], Counter())[pair[1]] += 1

    def _via_dirs(self, path: str) -> FileMove | None:
        for d in _parents(path):
            votes = self.dir_votes.get(d)
            if votes and not _is_dir(self.new_tree, d):
                target = votes.most_common(1)[0][0]
                return FileMove(path, target + path[len(d) :], "directory")
        return None

    def follow(self, path: str) -> FileMove | None:
        """Where `path`, missing from the new release, most likely went (None: not found)."""
        if path not in self.files:
            self._search(path)
        if path in self.files:
            return FileMove(path, self.files[path], "file")
        return self._via_dirs(path)

    def follow_created(self, path: str) -> FileMove | None:
        """For a file a patch creates: follow its directory if that directory moved away."""
        parent = posixpath.dirname(path)
        if not parent or _is_dir(self.new_tree, parent):
            return None
        if not _is_dir(self.old_tree, parent):
            return None  # the directory is new with the patch; nothing to follow
        self._search(path)
        return self._via_dirs(path)


def rewrite(patch: Patch, moves: dict[str, FileMove]) -> Patch:
    """`patch` with every path in `moves` replaced by where it went."""
    if not moves:
        return patch

    def where(path: str | None) -> str | None:
        return moves[path].new if path is not None and path in moves else path

    files: list[FileDiff] = [
        dataclasses.replace(f, old_path=where(f.old_path), new_path=where(f.new_path)) for f in patch.files
    ]
    return dataclasses.replace(patch, files=tuple(files))
