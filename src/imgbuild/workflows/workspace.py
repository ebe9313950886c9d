"""The project's work area `.imgbuild-work/`: the state dirs of `patches rebase` and `patches edit`
(a `state.json` and a scratch work tree whose git config holds the state's token, so a foreign
directory is never taken for one), and the lock every command that changes them holds."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imgbuild import digests
from imgbuild.atomic import write_json
from imgbuild.errors import StateError, disk_full, looks_full
from imgbuild.upstream.commits import init_scratch, scratch_marker
from imgbuild.upstream.git import GitRepo

WORK = ".imgbuild-work"
KINDS = {"rebase": "patches rebase", "pq": "patches edit"}
INPUTS = ("patches/series", "patches/upstream.yaml")  # what every session hashes, besides its patches


def work_root(root: Path) -> Path:
    return root / WORK


def state_dir(root: Path, kind: str) -> Path:
    return work_root(root) / kind


@contextlib.contextmanager
def flocked(path: Path, busy: str, hint: str, *, unlink: bool = False) -> Iterator[None]:
    """Hold an flock on `path` (our pid written in it), or refuse with `busy (pid N)` when another holds it.
    With `unlink` the file goes when released, so a waiter that opened it before locks the one there now."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateError(f"{busy} (pid {holder})", hint=hint) from None
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
        if unlink:
            with contextlib.suppress(OSError):
                path.unlink()
        os.close(fd)


@dataclass(frozen=True)
class Session:
    """One state dir of `.imgbuild-work/` (a rebase or a `patches edit`): its lock, `state.json`, the
    scratch work tree on the cache mirror's objects, and the hashes of the inputs it started from."""

    root: Path
    kind: str

    @property
    def directory(self) -> Path:
        return state_dir(self.root, self.kind)

    @property
    def tree(self) -> Path:
        return self.directory / "tree"

    @property
    def txn(self) -> Path:
        """Where the journal of its write to patches/ lives (export.Journal)."""
        return self.directory / "txn"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the project's patch-state lock (one for every session), or refuse if another command holds it."""
        base = work_root(self.root)
        base.mkdir(parents=True, exist_ok=True)
        busy = f"another imgbuild command is changing the patch state of {self.root}"
        with flocked(base / "patches.lock", busy, "wait for it to finish"):
            yield

    def read(self) -> dict[str, Any] | None:
        """The state, None if there is none; StateError if the directory is not imgbuild's."""
        directory, kind = self.directory, self.kind
        if not directory.exists():
            return None
        try:
            data = json.loads((directory / "state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        if not isinstance(data, dict) or data.get("kind") != kind:
            raise StateError(
                f"{directory} exists but was not made by `imgbuild {KINDS[kind]}` (no valid state.json); "
                "refusing to touch it",
                hint="move it out of the way yourself if it is not needed",
            )
        if scratch_marker(self.tree) != data.get("token"):
            raise StateError(
                f"{self.tree} is not the work tree imgbuild made for this {KINDS[kind]} (foreign or replaced); "
                "refusing to use it",
                hint=f"inspect it, then remove {directory} yourself, or restore the original work tree",
            )
        return data

    def save(self, data: Mapping[str, Any]) -> None:
        write_json(self.directory / "state.json", data)

    def scratch(self) -> GitRepo:
        return GitRepo(self.tree)

    def create(self, objects: Path, token: str, fill: Callable[[GitRepo, Path], None]) -> None:
        """Make the state dir in one step: a scratch repo on `objects`, filled by `fill(repo, staging)`."""

        self.directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.kind}-staging-", dir=self.directory.parent))
        try:
            fill(init_scratch(staging / "tree", objects, token), staging)
            os.rename(staging, self.directory)
        except BaseException as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, FileExistsError):
                raise StateError(f"{self.directory} appeared while preparing the {KINDS[self.kind]}") from exc
            if isinstance(exc, Exception) and looks_full(exc, self.directory.parent):
                raise disk_full(f"cannot prepare the {KINDS[self.kind]} (patches/ is unchanged)", self.root) from exc
            raise

    def remove(self) -> None:
        """Remove the state dir in one step: renamed aside first, then deleted, so a kill part-way leaves it
        whole or gone, never a state.json beside half a work tree (which no command could then use or remove).
        What such a kill left aside, under an imgbuild-only name, goes now."""
        aside = self.directory.parent / f".{self.kind}-removed-{os.getpid()}-{os.urandom(4).hex()}"
        os.rename(self.directory, aside)
        for old in self.directory.parent.glob(f".{self.kind}-removed-*"):
            shutil.rmtree(old, ignore_errors=True)

    def inputs(self, patch_paths: Iterable[str]) -> dict[str, str | None]:
        """sha256 of the series, the pin and the given patches (paths relative to the project root)."""
        return {p: digests.sha256_file_or_none(self.root / p) for p in (*INPUTS, *patch_paths)}
