"""A tmpfs mounted for a test: a read-only, small or full file system, made for real."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs at `path`. Mounting needs root: as root (.ci/run) it is `mount`; otherwise `sudo -n mount`
    (the GitHub runner's passwordless sudo), owned by this user so the test can fill it."""
    path.mkdir(parents=True, exist_ok=True)
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    owner = "" if not sudo else f",uid={os.geteuid()},gid={os.getegid()}"
    mount = [*sudo, "mount", "-t", "tmpfs", "-o", options + owner, "tmpfs", str(path)]
    try:
        proc = subprocess.run(mount, capture_output=True, text=True)
        problem = proc.stderr.strip() if proc.returncode != 0 else ""
    except FileNotFoundError as exc:  # no sudo
        problem = str(exc)
    if problem:
        pytest.fail(
            f"cannot mount a tmpfs here ({' '.join(mount)}: {problem}); these tests make a read-only and a full "
            "file system, which needs root or passwordless sudo: run the tests as root, as .ci/run does",
            pytrace=False,
        )
    try:
        yield path
    finally:
        subprocess.run([*sudo, "umount", str(path)], check=True)
