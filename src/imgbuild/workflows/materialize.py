"""Write a patched tree to a new directory, all or nothing: staged beside it and renamed into place,
one writer at a time (a lock beside it; a killed run's staging is removed by the next)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from imgbuild.errors import StateError, write_error
from imgbuild.upstream.git import GitRepo
from imgbuild.workflows.workspace import flocked


def write_tree(
    dest: Path,
    repo: GitRepo,
    commit: str,
    changed: Mapping[str, bytes | None],
    *,
    only_changed: bool = False,
    more: Sequence[tuple[GitRepo, str]] = (),
) -> int:
    """Write the pristine `commit` (and the `more` pins' (repo, commit)) overlaid with `changed` to `dest`.
    Returns files written."""
    dest = Path(os.path.abspath(dest))
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        busy, hint = f"another imgbuild is writing {dest}", "wait for it to finish, or choose another DIR"
        with flocked(dest.parent / f".{dest.name}.imgbuild-lock", busy, hint, unlink=True):
            if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
                raise StateError(
                    f"{dest} exists and is not empty", hint="choose a new directory; imgbuild never overwrites one"
                )
            staging = dest.parent / f".{dest.name}.imgbuild-staging"
            if staging.is_dir() and not staging.is_symlink():  # left by a run that was killed
                shutil.rmtree(staging)
            return _write(dest, staging, [(repo, commit), *more], changed, only_changed)
    except OSError as exc:
        raise write_error(dest, exc) from exc


def _write(
    dest: Path,
    staging: Path,
    pins: Sequence[tuple[GitRepo, str]],
    changed: Mapping[str, bytes | None],
    only_changed: bool,
) -> int:
    staging.mkdir()
    try:
        count = 0
        for repo, commit in [] if only_changed else pins:
            archive = repo.archive(commit)
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(staging, filter="data")
                count += sum(1 for m in tar.getmembers() if m.isfile())
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
