"""Write a patched tree to a directory, all or nothing.

Everything is written into a staging directory beside the destination and
renamed into place at the end, so an interrupted run leaves the destination
untouched (and the staging directory is removed).
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from imgbuild.errors import StateError
from imgbuild.gitio import GitRepo


def write_tree(
    dest: Path,
    repo: GitRepo,
    commit: str,
    changed: Mapping[str, bytes | None],
    *,
    only_changed: bool = False,
) -> int:
    """Write the pristine `commit` overlaid with `changed` to `dest`. Returns files written."""
    dest = dest.resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise StateError(
            f"{dest} exists and is not empty", hint="choose a new directory; imgbuild never overwrites one"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    try:
        count = 0
        if not only_changed:
            archive = repo.repo.git.archive(commit, output_stream=None, stdout_as_string=False)
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(staging, filter="data")
                count = sum(1 for m in tar.getmembers() if m.isfile())
        for path, data in sorted(changed.items()):
            target = staging / path
            if data is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            existed = target.exists()
            target.write_bytes(data)
            count += 0 if existed else 1
        if dest.exists():
            dest.rmdir()
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return count
