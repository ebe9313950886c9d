"""What a finished test leaves behind that is large and worth nothing afterwards.

pytest keeps the temporary directories of the last three runs, and every docker-tier
test has a cache of its own: with BuildKit's OCI layout in it (hundreds of MB after a
build) the three runs grew /tmp/pytest-of-root to 14 GB.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# relative to a cache (or any directory a test made): skeleton rootfs tars, a docker-registry's blobs
LARGE = ("skeleton", "docker/registry")


def drop_large(directory: Path) -> None:
    for rel in LARGE:
        shutil.rmtree(directory / rel, ignore_errors=True)
