"""Content digests of files, computed in chunks (wheels and rootfs tars are large)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file_or_none(path: Path) -> str | None:
    """sha256 of a file, or None when it does not exist (inputs a session records)."""
    try:
        return sha256_file(path)
    except FileNotFoundError:
        return None
