"""Synthetic upstreams and projects built with real git, for tests.

`Upstream` is a local git repository whose tags play the part of vLLM
releases. `make_project` writes a project (pin, series, patches, variants)
whose patches are real `git diff --full-index` output.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import yaml

T = TypeVar("T")

ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
}


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, capture_output=True, check=True, env={**os.environ, **ENV}
    )
    return proc.stdout.decode()


# Diffs already made, by (tree of the base, edits, on_top_of): the output depends on nothing else,
# and making one costs six git processes, looking it up one.
_DIFFS: dict[tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], str] = {}


class Upstream:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        built_once("empty", path, _init, lambda _value, _at: None)  # a copy of one `git init`

    @classmethod
    def at(cls, path: Path) -> Upstream:
        """An Upstream object for a repository that already exists at `path`."""
        up = cls.__new__(cls)
        up.path = path
        return up

    @property
    def url(self) -> str:
        return self.path.as_uri()

    def is_empty(self) -> bool:
        """Just `git init`ed: no commit, no file (read from disk, no git process)."""
        dot = self.path / ".git"
        return (
            [p.name for p in self.path.iterdir()] == [".git"]
            and not (dot / "index").exists()
            and not (dot / "packed-refs").exists()
            and not any(p.is_file() for p in (dot / "refs").rglob("*"))
        )

    def release(self, tag: str, files: dict[str, str | None]) -> str:
        """Commit `files` (None deletes) and tag the commit; return its id."""
        gone = [rel for rel, text in files.items() if text is None]
        written = [rel for rel, text in files.items() if text is not None]
        for rel in written:
            p = self.path / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(files[rel] or "")
        if gone:
            git(self.path, "rm", "-q", "--", *gone)
        if written:
            git(self.path, "add", "--", *written)
        git(self.path, "commit", "-q", "--allow-empty", "-m", tag)
        git(self.path, "tag", tag)
        return git(self.path, "rev-parse", "HEAD").strip()

    def diff(self, base: str, edits: dict[str, str], on_top_of: dict[str, str] | None = None) -> str:
        """A `git diff --full-index` of `edits` applied on top of `base`.

        `on_top_of` is committed first (as another patch would have left the
        files), so the diff's context and original blobs are those contents.
        """
        tree = git(self.path, "rev-parse", f"{base}^{{tree}}").strip()
        key = (tree, tuple(sorted(edits.items())), tuple(sorted((on_top_of or {}).items())))
        if key not in _DIFFS:
            _DIFFS[key] = self._diff(base, edits, on_top_of)
        return _DIFFS[key]

    def _diff(self, base: str, edits: dict[str, str], on_top_of: dict[str, str] | None) -> str:
        git(self.path, "checkout", "-q", "--detach", base)
        if on_top_of:
            self._stage(on_top_of)
            git(self.path, "commit", "-qm", "on top of")
        self._stage(edits)
        out = git(self.path, "diff", "--cached", "--full-index")
        git(self.path, "reset", "-q", "--hard")
        git(self.path, "checkout", "-q", "main")
        return out

    def _stage(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            (self.path / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.path / rel).write_text(text)
        git(self.path, "add", "-A")

    def show(self, ref: str, path: str) -> str:
        return git(self.path, "show", f"{ref}:{path}")


def _init(path: Path) -> None:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")


def header(summary: str, group: str) -> str:
    return (
        f"Description: {summary}\n"
        " Longer explanation of the change.\n"
        "Author: Test Author <t@example.invalid>\n"
        "Forwarded: no\n"
        "Upstream-Status: Pending\n"
        f"Group: {group}\n"
        "Last-Update: 2026-11-01\n"
        "---\n"
    )


def make_project(
    root: Path,
    upstream: Upstream,
    tag: str,
    patches: list[tuple[str, str, str]],  # (filename, group, diff text)
    variants: dict[str, dict[str, object]] | None = None,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "patches").mkdir(exist_ok=True)
    (root / "images").mkdir(exist_ok=True)
    commit = git(upstream.path, "rev-parse", f"{tag}^{{commit}}").strip()
    pin = {
        "name": "vllm",
        "package_root": "vllm",
        "tag": tag,
        "commit": commit,
        "source": {"kind": "git", "url": upstream.url},
    }
    (root / "patches" / "upstream.yaml").write_text(yaml.safe_dump(pin))
    lines = ["# test series"]
    for filename, group, diff in patches:
        (root / "patches" / filename).write_text(header(f"change {filename}", group) + diff)
        lines.append(filename)
    (root / "patches" / "series").write_text("\n".join(lines) + "\n")
    for name, body in (variants or {"latest": {"name": "latest"}}).items():
        (root / "images" / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return root


def numbered(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(1, n + 1))


_TEMPLATES: dict[str, tuple[Path, object]] = {}
_TEMPLATE_ROOT: list[Path] = []


def built_once(key: str, path: Path, build: Callable[[Path], T], rebind: Callable[[T, Path], T]) -> T:
    """`build(path)` the first time `key` is asked for in this process; later, a copy of that first
    repository at `path`, and `rebind(first_result, path)`.

    The builders are deterministic (fixed identity and dates give the same commit ids), so the
    copy is the repository a second build would make, without its hundred git processes.
    `path` must not exist yet, as for a build.
    """
    if key in _TEMPLATES:
        template, value = _TEMPLATES[key]
        shutil.copytree(template, path, symlinks=True)
        return rebind(cast(T, value), path)
    result = build(path)
    if not _TEMPLATE_ROOT:
        _TEMPLATE_ROOT.append(Path(tempfile.mkdtemp(prefix="imgbuild-test-worlds-")))
        atexit.register(shutil.rmtree, _TEMPLATE_ROOT[0], True)
    template = _TEMPLATE_ROOT[0] / key
    shutil.copytree(path, template, symlinks=True)  # before the test changes anything
    # one pack instead of a directory per loose object, and no sample hooks: a copy is ~30 files, not ~120
    git(template, "repack", "-a", "-d", "-q")
    for sample in (template / ".git" / "hooks").glob("*.sample"):
        sample.unlink()
    _TEMPLATES[key] = (template, result)
    return result


def build_on(key: str, up: Upstream, build: Callable[[Upstream], T]) -> T:
    """`build(up)` for a builder that fills a freshly initialised Upstream (`built_once` for it).

    An Upstream that has anything in it already is built on as it is."""
    if not up.is_empty():
        return build(up)

    def fresh(path: Path) -> T:
        return build(Upstream(path))

    def rebind(value: T, _at: Path) -> T:
        # the first build's own Upstream object is `up` here; any other result is a value
        return cast(T, up) if isinstance(value, Upstream) else value

    shutil.rmtree(up.path)
    return built_once(key, up.path, fresh, rebind)
