"""Synthetic upstreams and projects built with real git, for tests.

`Upstream` is a local git repository whose tags play the part of vLLM
releases. `make_project` writes a project (pin, series, patches, variants)
whose patches are real `git diff --full-index` output.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

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


class Upstream:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")

    @property
    def url(self) -> str:
        return self.path.as_uri()

    def release(self, tag: str, files: dict[str, str | None]) -> str:
        """Commit `files` (None deletes) and tag the commit; return its id."""
        for rel, text in files.items():
            p = self.path / rel
            if text is None:
                git(self.path, "rm", "-q", rel)
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            git(self.path, "add", rel)
        git(self.path, "commit", "-q", "--allow-empty", "-m", tag)
        git(self.path, "tag", tag)
        return git(self.path, "rev-parse", "HEAD").strip()

    def diff(self, base: str, edits: dict[str, str], on_top_of: dict[str, str] | None = None) -> str:
        """A `git diff --full-index` of `edits` applied on top of `base`.

        `on_top_of` is committed first (as another patch would have left the
        files), so the diff's context and original blobs are those contents.
        """
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
