"""All git access goes through this module.

Commands run via `GitRepo.run` and the named functions below, all through
`_git` and the process funnel (imgbuild/proc.py), which echoes them
(IMGBUILD_ECHO=1) so users can see exactly what imgbuild did; `git
fast-import` streams through `fast_import`. Objects (commits, trees, blobs)
are read through `ObjectReader`: one long-running `git cat-file --batch` per
repository instead of a process per blob. gitpython (`GitRepo.repo`) is
imported only by what writes objects in-process or needs its Repo.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from imgbuild import proc

if TYPE_CHECKING:
    import git

SYMLINK_MODE = "120000"
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


def _git(
    args: Iterable[str], stdin: bytes | None = None, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> proc.CompletedProcess[bytes]:
    """`git ARGS` with imgbuild's identity; the exit status is the caller's to read."""
    try:
        return proc.run(["git", *args], input=stdin, cwd=cwd, env={**os.environ, **IDENTITY, **(env or {})})
    except proc.ToolNotFound as exc:
        raise GitError("git is not installed (not found on PATH)") from exc


def _is_git_dir(path: Path) -> bool:
    """A git directory (bare, or a work tree's .git), by the files gitpython's Repo looks for."""
    return (path / "objects").is_dir() and (path / "refs").is_dir() and (path / "HEAD").is_file()


def _init(path: Path, *flags: str) -> None:
    """`git init` (what gitpython's Repo.init runs too), creating `path` and its parents."""
    path.mkdir(parents=True, exist_ok=True)
    done = _git(["init", "-q", *flags, str(path)])
    if done.returncode != 0:
        raise GitError(f"git init {path} failed: {done.stderr.decode(errors='replace').strip()}")


class GitRepo:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not (_is_git_dir(self.path) or _is_git_dir(self.path / ".git") or (self.path / ".git").is_file()):
            raise GitError(f"{path} is not a git repository")
        self._repo: git.Repo | None = None
        self.objects = ObjectReader(self.path)  # started on the first read

    @property
    def repo(self) -> git.Repo:
        """gitpython's Repo, made on first use (importing gitpython costs more than a check's reads)."""
        if self._repo is None:
            import git
            from git.exc import InvalidGitRepositoryError, NoSuchPathError

            try:
                self._repo = git.Repo(self.path)
            except (InvalidGitRepositoryError, NoSuchPathError) as exc:
                raise GitError(f"{self.path} is not a git repository") from exc
        return self._repo

    @property
    def bare(self) -> bool:
        """No work tree: the path is the git directory itself (what `init_bare` makes)."""
        return _is_git_dir(self.path)

    @classmethod
    def init_bare(cls, path: Path) -> GitRepo:
        _init(path, "--bare")
        repo = cls(path)
        repo.run("config", "gc.auto", "0")
        return repo

    @classmethod
    def init(cls, path: Path) -> GitRepo:
        _init(path)
        return cls(path)

    def run(self, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
        """Run one git command in this repository and return its stdout."""
        done = _git(args, stdin, self.path, env)
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace").strip()
            raise GitError(f"git {' '.join(args)} failed: {stderr}")
        return done.stdout.decode(errors="surrogateescape")

    def archive(self, commit: str, *paths: str) -> bytes:
        """`git archive` of `commit` (tar), limited to `paths` when given."""
        done = _git(["archive", "--format=tar", commit, *(["--", *paths] if paths else [])], cwd=self.path)
        if done.returncode != 0:
            raise GitError(f"git archive {commit} failed: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout

    # -- objects ---------------------------------------------------------
    def resolve_commit(self, rev: str) -> str | None:
        """Full commit id for `rev`, or None if it does not exist here."""
        found = self.objects.read(f"{rev}^{{commit}}")
        return found.sha if found is not None and found.kind == "commit" else None

    def has_object(self, sha: str) -> bool:
        return _is_hex(sha) and self.objects.read(sha) is not None

    def read_blob(self, sha: str) -> bytes:
        found = self.objects.read(sha) if _is_hex(sha) else None
        if found is None:
            raise GitError(f"blob {sha} is not in {self.path}")
        return found.data

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

    # -- named porcelain (what rebase, the patch queue and the image labels ask of a work tree) --
    def verify(self, rev: str) -> str:
        """`rev-parse --verify` of `rev`: the object id; GitError when `rev` does not resolve."""
        return self.run("rev-parse", "--verify", "-q", rev).strip()

    def commit_time(self, commit: str) -> int:
        """The committer date of `commit` in seconds, read from its object (no `git show` process)."""
        found = self.objects.read(f"{commit}^{{commit}}")
        if found is None:
            raise GitError(f"no commit {commit} in {self.path}")
        for line in found.data.split(b"\n\n", 1)[0].splitlines():
            if line.startswith(b"committer "):
                return int(line.rsplit(b" ", 2)[1])  # "committer NAME <EMAIL> SECONDS ZONE"
        return 0

    def remote_url(self, name: str = "origin") -> str:
        return self.run("remote", "get-url", name).strip()

    def status(self, *paths: str) -> str:
        """`git status --porcelain` of `paths` ('' when they are clean)."""
        return self.run("status", "--porcelain", "--", *paths)

    def untracked(self) -> list[str]:
        """Files in the work tree that git does not track and does not ignore."""
        return [p for p in self.run("ls-files", "--others", "--exclude-standard", "-z").split("\0") if p]

    def stage(self, *paths: str) -> None:
        """`git add -A` of `paths` (new, changed and deleted files alike)."""
        self.run("add", "-A", "--", *paths)

    def stage_tracked(self) -> None:
        """`git add -u`: every change to a tracked file."""
        self.run("add", "-u")

    def staged_paths(self, commit: str) -> list[str]:
        """Paths whose staged content differs from `commit`."""
        return [p for p in self.run("diff", "--cached", "--name-only", "-z", commit).split("\0") if p]

    def write_tree(self) -> str:
        """The tree of the index, written as an object."""
        return self.run("write-tree").strip()

    def move_ref(self, ref: str, commit: str, reason: str) -> None:
        """Point `ref` (HEAD: the branch it names) at `commit`, with `reason` in the reflog."""
        self.run("update-ref", "-m", reason, ref, commit)

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


def merge_file(ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """`git merge-file -p`: the merged bytes and the number of conflicts."""
    with tempfile.TemporaryDirectory(prefix="imgbuild-merge-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(tmp) / name
            p.write_bytes(data)
            names.append(str(p))
        done = _git(["merge-file", "-p", "-L", labels[0], "-L", labels[1], "-L", labels[2], *names])
    if done.returncode < 0 or done.returncode > 127:
        raise GitError(f"git merge-file failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout, done.returncode


@dataclass(frozen=True)
class GitObject:
    sha: str
    kind: str  # "blob", "tree", "commit" or "tag"
    data: bytes


def _is_hex(sha: str) -> bool:
    return len(sha) >= 4 and all(c in "0123456789abcdef" for c in sha.lower())


class ObjectReader:
    """Objects of one repository through one long-lived `git cat-file --batch` (started, and echoed, on
    the first read): a read is a round trip on a pipe, not a process or a pure-Python pack read."""

    BATCH = 512  # names written ahead of reading: far below a pipe's buffer, so neither side blocks

    def __init__(self, path: Path) -> None:
        self.path = path
        self._child: proc.Popen[bytes] | None = None
        self._lock = threading.Lock()  # one request and its answer at a time (smoke runs worker threads)

    def read(self, name: str) -> GitObject | None:
        """The object `name` (an id, or a revision like `TAG^{commit}`) names; None when there is none."""
        return self.read_many([name])[0]

    def read_many(self, names: Sequence[str]) -> list[GitObject | None]:
        """`read` of each name, in order, the names written BATCH at a time."""
        out: list[GitObject | None] = []
        with self._lock:
            child = self._start()
            assert child.stdin is not None and child.stdout is not None
            for at in range(0, len(names), self.BATCH):
                chunk = names[at : at + self.BATCH]
                asked = [n for n in chunk if n and "\n" not in n]  # a name is one line of the protocol
                try:
                    child.stdin.write("".join(f"{n}\n" for n in asked).encode("utf-8", errors="surrogateescape"))
                    child.stdin.flush()
                except OSError as exc:
                    raise self._failed(child) from exc
                answers = iter([self._answer(child) for _ in asked])
                out.extend(next(answers) if n and "\n" not in n else None for n in chunk)
        return out

    def _answer(self, child: proc.Popen[bytes]) -> GitObject | None:
        assert child.stdout is not None
        header = child.stdout.readline()
        if not header.endswith(b"\n"):
            raise self._failed(child)
        if header.endswith((b" missing\n", b" ambiguous\n")):
            return None
        sha, kind, size = header.split()
        data = child.stdout.read(int(size) + 1)  # the object, then a newline
        if len(data) != int(size) + 1:
            raise self._failed(child)
        return GitObject(sha.decode(), kind.decode(), data[:-1])

    def _start(self) -> proc.Popen[bytes]:
        if self._child is None:
            errors = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the reader's life, closed by _stop_reader
            try:
                self._child = proc.popen(
                    ["git", "cat-file", "--batch"], stdin=proc.PIPE, stdout=proc.PIPE, stderr=errors, cwd=self.path
                )
            except proc.ToolNotFound as exc:
                errors.close()
                raise GitError("git is not installed (not found on PATH)") from exc
            self._errors = errors
            weakref.finalize(self, _stop_reader, self._child, errors)
        return self._child

    def _failed(self, child: proc.Popen[bytes]) -> GitError:
        child.wait()
        self._errors.seek(0)
        lines = self._errors.read().decode(errors="replace").strip().splitlines()
        why = lines[0] if lines else f"exit {child.returncode}"
        return GitError(f"git cat-file --batch in {self.path} failed: {why}")


def _stop_reader(child: proc.Popen[bytes], errors: IO[bytes]) -> None:
    """End a reader: EOF on its stdin is what makes `git cat-file --batch` exit."""
    with contextlib.suppress(OSError):
        if child.stdin is not None:
            child.stdin.close()
    try:
        child.wait(timeout=5)
    except proc.TimeoutExpired:
        child.kill()
        child.wait()
    if child.stdout is not None:
        child.stdout.close()
    errors.close()


def parse_tree(data: bytes, prefix: str, id_bytes: int = 20) -> dict[str, TreeEntry]:
    """A tree object's entries by name (`mode SP name NUL id`), each path under `prefix`."""
    entries: dict[str, TreeEntry] = {}
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        mode = data[pos:space].decode()
        name = data[space + 1 : nul].decode("utf-8", errors="surrogateescape")
        kind = "tree" if mode == "40000" else "commit" if mode == "160000" else "blob"
        entries[name] = TreeEntry(prefix + name, mode, kind, data[nul + 1 : nul + 1 + id_bytes].hex())
        pos = nul + 1 + id_bytes
    return entries


class CommitTree:
    """Read-only view of one commit, for apply.Tree. Reads through the repository's ObjectReader."""

    def __init__(self, repo: GitRepo, commit: str) -> None:
        self.repo = repo
        self.commit = commit
        root = repo.objects.read(f"{commit}^{{tree}}")
        if root is None or root.kind != "tree":
            raise GitError(f"{commit} is not a commit in {repo.path}")
        self._root = TreeEntry("", "40000", "tree", root.sha)
        # A commit never changes, so lookups and contents can be kept.
        self._items: dict[str, TreeEntry | None] = {}
        self._data: dict[str, bytes | None] = {}
        self._dirs: dict[str, dict[str, TreeEntry]] = {root.sha: parse_tree(root.data, "", len(root.sha) // 2)}

    def _item(self, path: str) -> TreeEntry | None:
        # One directory at a time, each tree read and parsed once.
        if path not in self._items:
            parent, _, name = path.rpartition("/")
            tree = self._root if not parent else self._item(parent)
            self._items[path] = self._entries(tree).get(name) if tree is not None and tree.kind == "tree" else None
        return self._items[path]

    def _entries(self, tree: TreeEntry) -> dict[str, TreeEntry]:
        if tree.sha not in self._dirs:
            found = self.repo.objects.read(tree.sha)
            if found is None or found.kind != "tree":
                raise GitError(f"tree {tree.sha} ({tree.path}) of {self.commit} cannot be read in {self.repo.path}")
            self._dirs[tree.sha] = parse_tree(found.data, f"{tree.path}/" if tree.path else "", len(tree.sha) // 2)
        return self._dirs[tree.sha]

    def read(self, path: str) -> bytes | None:
        if path not in self._data:
            item = self._item(path)
            self._data[path] = None if item is None or item.kind != "blob" else self.repo.read_blob(item.sha)
        return self._data[path]

    def prefetch(self, paths: Iterable[str]) -> None:
        """Read the blobs of `paths` in one batch of requests instead of a round trip each.
        Anything unexpected leaves them to `read`, one at a time."""
        wanted: dict[str, list[str]] = {}
        for path in paths:
            item = None if path in self._data else self._item(path)
            if item is not None and item.kind == "blob":
                wanted.setdefault(item.sha, []).append(path)
        for found, (sha, where) in zip(self.repo.objects.read_many(list(wanted)), wanted.items(), strict=True):
            if found is not None and found.sha == sha and found.kind == "blob":
                for path in where:
                    self._data[path] = found.data

    def blob_sha(self, path: str) -> str | None:
        item = self._item(path)
        return None if item is None or item.kind != "blob" else item.sha

    def blob(self, sha: str) -> bytes | None:
        return self.repo.read_blob(sha) if self.repo.has_object(sha) else None

    def symlink_prefix(self, path: str) -> str | None:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            item = self._item(prefix)
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
        done = _run_bare([*args, self.commit, "--", under], cwd=self.repo.path)
        if done.returncode == 1:  # nothing matched
            return []
        if done.returncode != 0:
            raise GitError(f"git grep in {self.repo.path} failed: {done.stderr.decode(errors='replace').strip()}")
        prefix = f"{self.commit}:"
        names = done.stdout.decode(errors="surrogateescape").split("\0")
        return [n.removeprefix(prefix) for n in names if n]

    def paths(self, under: str) -> list[str]:
        """Every blob path below `under` (used to follow renames), breadth first."""
        item = self._item(under)
        if item is None or item.kind != "tree":
            return []
        found: list[str] = []
        level = [item]
        while level:
            below: list[TreeEntry] = []
            for tree in level:
                for entry in self._entries(tree).values():
                    if entry.kind == "blob":
                        found.append(entry.path)
                    elif entry.kind == "tree":
                        below.append(entry)
            level = below
        return found


# -- Scratch repositories, commit stacks and diffs (rebase, patch queue, check) --
# Additive helpers; every git call still goes through GitRepo.run or _run_bare.

SCRATCH_MARKER_KEY = "imgbuild.scratch"
LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}
DIFF_FLAGS = (
    "--full-index", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
    "--src-prefix=a/", "--dst-prefix=b/", "--diff-algorithm=myers", "--indent-heuristic",
)  # fmt: skip


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


def _run_bare(args: list[str], stdin: bytes | None = None, cwd: Path | None = None) -> proc.CompletedProcess[bytes]:
    return _git(args, stdin, cwd)


def init_scratch(path: Path, objects: Path, marker: str) -> GitRepo:
    """A new non-bare repository at `path` borrowing objects from `objects` (alternates)."""
    path.mkdir(parents=True, exist_ok=True)
    done = _run_bare(["init", "-q", "--template=", str(path)])  # no sample hooks: less to create and remove
    if done.returncode != 0:
        raise GitError(f"git init {path} failed: {done.stderr.decode(errors='replace').strip()}")
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
    done = _run_bare(["config", "--file", str(path / ".git" / "config"), "--get", SCRATCH_MARKER_KEY])
    return (done.stdout.decode().strip() or None) if done.returncode == 0 else None


def tree_id(repo: GitRepo, commit: str) -> str:
    return repo.run("rev-parse", f"{commit}^{{tree}}").strip()


def commit_raw(
    repo: GitRepo, tree: str, parents: Iterable[str], message: str, env: Mapping[str, str] | None = None
) -> str:
    """A commit with this exact message (no cleanup, unlike `git commit`)."""
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    return repo.run(*args, "-F", "-", stdin=message.encode("utf-8", errors="surrogateescape"), env=env).strip()


def commit_files(repo: GitRepo, base_commit: str, files: Mapping[str, bytes | None], message: str) -> str:
    """A commit on `base_commit` with `files` replaced, written in-process (no git process)."""
    base = repo.repo.commit(base_commit)
    tree = _tree_in_process(repo, base.tree, files) or _store(repo, b"tree", b"")
    return _commit_in_process(repo, tree, [base_commit], message)


def _store(repo: GitRepo, kind: bytes, data: bytes) -> str:
    """Write a loose object in-process (gitdb), unless the repository has it already."""
    sha = hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data, usedforsecurity=False).hexdigest()
    if not repo.has_object(sha):
        from gitdb import IStream, LooseObjectDB

        LooseObjectDB(str(Path(repo.repo.git_dir) / "objects")).store(IStream(kind, len(data), io.BytesIO(data)))
    return sha


def _tree_key(name: str, is_tree: bool) -> bytes:
    return (name + "/" if is_tree else name).encode("utf-8", errors="surrogateescape")


def _tree_in_process(repo: GitRepo, tree: git.Tree | None, files: Mapping[str, bytes | None]) -> str | None:
    """The id of `tree` with `files` (paths relative to it) replaced; None when it ends up empty."""
    entries: dict[str, tuple[str, str]] = {}  # name -> (mode, sha)
    subtrees: dict[str, git.Tree] = {}
    if tree is not None:
        for item in tree:
            mode = "40000" if item.type == "tree" else f"{item.mode:o}"
            entries[item.name] = (mode, str(item.hexsha))
            if item.type == "tree":
                subtrees[item.name] = item
    nested: dict[str, dict[str, bytes | None]] = {}
    for path, data in files.items():
        head, sep, rest = path.partition("/")
        if sep:
            nested.setdefault(head, {})[rest] = data
        elif data is None:
            entries.pop(head, None)
        else:
            old_mode = entries.get(head, ("100644", ""))[0]
            entries[head] = (old_mode if old_mode in ("100644", "100755") else "100644", _store(repo, b"blob", data))
    for name, changes in nested.items():
        sha = _tree_in_process(repo, subtrees.get(name), changes)
        if sha is None:
            entries.pop(name, None)
        else:
            entries[name] = ("40000", sha)
    if not entries:
        return None
    body = b"".join(
        f"{mode} ".encode() + name.encode("utf-8", errors="surrogateescape") + b"\0" + bytes.fromhex(sha)
        for name, (mode, sha) in sorted(entries.items(), key=lambda kv: _tree_key(kv[0], kv[1][0] == "40000"))
    )
    return _store(repo, b"tree", body)


def _commit_in_process(repo: GitRepo, tree: str, parents: Iterable[str], message: str) -> str:
    who = f"{IDENTITY['GIT_AUTHOR_NAME']} <{IDENTITY['GIT_AUTHOR_EMAIL']}> {int(time.time())} +0000"
    lines = [f"tree {tree}", *(f"parent {p}" for p in parents), f"author {who}", f"committer {who}"]
    data = ("\n".join(lines) + "\n\n").encode() + message.encode("utf-8", errors="surrogateescape")
    return _store(repo, b"commit", data)


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
    fields = out.split("\0")
    result: list[tuple[str, str, str | None]] = []
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        if status[0] in "RC":
            result.append((status[0], fields[i + 1], fields[i + 2]))
            i += 3
        else:
            result.append((status[0], fields[i + 1], None))
            i += 2
    return result


def status_porcelain(repo: GitRepo) -> list[str]:
    return [line for line in repo.run("status", "--porcelain", "--untracked-files=all").splitlines() if line]


def range_diff(repo: GitRepo, old_range: str, new_range: str) -> str:
    return repo.run("range-diff", "--no-color", "--creation-factor=999", old_range, new_range)


def tags_at(repo: GitRepo, commit: str) -> list[str]:
    return repo.run("tag", "--points-at", commit).split()


def checkout_branch(repo: GitRepo, branch: str, commit: str) -> None:
    """Point `branch` at `commit`, make it HEAD, and reset the index and work tree to it."""
    repo.run("update-ref", f"refs/heads/{branch}", commit)
    repo.run("symbolic-ref", "HEAD", f"refs/heads/{branch}")
    repo.run("reset", "--hard", "-q", commit)


def head_commit(repo: GitRepo) -> str | None:
    return repo.resolve_commit("HEAD")


def diff_no_index(before: bytes, after: bytes, path: str, *, context: int = 3) -> str:
    """A diff of two versions of `path`, made by git without any repository."""
    with tempfile.TemporaryDirectory(prefix="imgbuild-diff-") as tmp:
        for side, data in (("a", before), ("b", after)):
            target = Path(tmp) / side / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        done = _run_bare(
            ["diff", "--no-index", *DIFF_FLAGS[:5], "--no-prefix", f"-U{context}", f"a/{path}", f"b/{path}"],
            cwd=Path(tmp),
        )
    if done.returncode not in (0, 1):
        raise GitError(f"git diff --no-index failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode("utf-8", errors="surrogateescape")


def patch_id(diff: str) -> str | None:
    """`git patch-id --stable` of a diff text (None for an empty diff)."""
    done = _run_bare(["patch-id", "--stable"], stdin=diff.encode("utf-8", errors="surrogateescape"))
    if done.returncode != 0:
        raise GitError(f"git patch-id failed: {done.stderr.decode(errors='replace').strip()}")
    out = done.stdout.decode().split()
    return out[0] if out else None


def ls_remote_tags(url: str) -> list[str]:
    done = _run_bare(["ls-remote", "--tags", "--refs", url])
    if done.returncode != 0:
        raise GitError(f"git ls-remote {url} failed: {done.stderr.decode(errors='replace').strip()}")
    return [line.split("refs/tags/", 1)[1] for line in done.stdout.decode().splitlines() if "refs/tags/" in line]


# -- The cache mirror's checks and its one stream (upstream/mirror.py) --
def ref_target(path: Path, ref: str) -> str:
    """The object `ref` points at in the repository at `path` ('' when there is no such ref).
    GitError (its first stderr line) when the refs cannot be read: a broken ref is not a missing one."""
    done = _run_bare(["for-each-ref", "--format=%(objectname)", ref], cwd=path)
    err = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0 or err:
        raise GitError((err or f"git for-each-ref exited {done.returncode}").splitlines()[0])
    return done.stdout.decode().strip()


def check_connected(path: Path, commit: str) -> None:
    """Every object of `commit` is there and readable (`git fsck --connectivity-only`); GitError naming the first
    problem otherwise."""
    done = _run_bare(["fsck", "--connectivity-only", "--no-dangling", "--no-progress", commit], cwd=path)
    lines = done.stderr.decode(errors="replace").splitlines()
    bad = [ln for ln in lines if ln.startswith(("error", "fatal", "missing", "broken"))]
    if done.returncode != 0 or bad:
        raise GitError(bad[0] if bad else f"git fsck exited {done.returncode}")


@contextlib.contextmanager
def fast_import(repo: GitRepo, *options: str, config: Mapping[str, str] | None = None) -> Iterator[IO[bytes]]:
    """A `git fast-import` into `repo`: write its commands to the stream yielded. GitError (with the end of
    fast-import's stderr) when it fails; a write it refused early (a broken pipe) is reported that way too."""
    args = [a for key, value in (config or {}).items() for a in ("-c", f"{key}={value}")]
    with tempfile.TemporaryFile() as errors:
        try:
            child = proc.popen(
                ["git", *args, "fast-import", *options],
                cwd=repo.path,
                stdin=proc.PIPE,
                stdout=proc.DEVNULL,
                stderr=errors,
            )
        except proc.ToolNotFound as exc:
            raise GitError("git is not installed (not found on PATH)") from exc
        assert child.stdin is not None
        try:
            yield child.stdin
        except BrokenPipeError:
            pass  # fast-import stopped early; its exit status and stderr say why
        except BaseException:
            child.kill()
            child.wait()
            raise
        finally:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()
        returncode = child.wait()
        errors.seek(0)
        stderr = errors.read()
    if returncode != 0:
        raise GitError(f"git fast-import failed: {stderr.decode(errors='replace')[-400:]}")
