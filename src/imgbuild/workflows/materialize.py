"""Write a patched tree to a new directory, all or nothing: staged beside it and renamed into place,
one writer at a time (a lock beside it; a killed run's staging is removed by the next)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from imgbuild.errors import StateError, write_error
from imgbuild.upstream.git import GitRepo


def staging_path(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.imgbuild-staging"


@contextlib.contextmanager
def dest_lock(dest: Path) -> Iterator[None]:
    """Hold the lock of `dest`, or refuse (exit 10) when another imgbuild holds it."""
    path = dest.parent / f".{dest.name}.imgbuild-lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateError(
                f"another imgbuild is writing {dest} (pid {holder})",
                hint="wait for it to finish, or choose another DIR",
            ) from None
        # The holder before us may have removed the file after we opened it: lock the file that is there now.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


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
        with dest_lock(dest):
            if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
                raise StateError(
                    f"{dest} exists and is not empty", hint="choose a new directory; imgbuild never overwrites one"
                )
            staging = staging_path(dest)
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
