"""Content digests of files, computed in chunks (wheels and rootfs tars are large)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def sha256_file_or_none(path: Path) -> str | None:
    """sha256 of a file, or None when it does not exist (inputs a session records)."""
    try:
        return sha256_file(path)
    except FileNotFoundError:
        return None
