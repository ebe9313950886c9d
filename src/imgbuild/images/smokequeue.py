"""Smoke one build's images in worker threads, and take what they found in plan order.

Each image's smoke test starts as soon as the image is built, while the next
image builds. Everything the build shows or changes for an image (its say
lines, its smoke report, raising its SmokeError, moving its tags) is an entry
of the image's slot, played on the calling thread, slot after slot in plan
order: an image is finalised only after every earlier one, exactly as when the
images were smoked one after the other.

Threads: only the worker runs in another thread, on an Engine of its own
(`Engine.fork`: its own SDK client, no memo); the slots, the caller's Engine and
its memo stay on the calling thread.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from imgbuild.images.docker import Engine

T = TypeVar("T")
Say = Callable[[str], None]
Restore = Callable[[dict[str, str | None]], None]  # put these tags back (ref -> previous image id or None)
MAX_WORKERS = 4


def workers() -> int:
    """Smoke containers wait on qemu and the daemon as much as on a core: two at least, four at most."""
    return max(2, min(MAX_WORKERS, os.cpu_count() or 1))


@dataclass
class _Say:
    text: str


@dataclass
class _Wait(Generic[T]):
    future: Future[T]
    then: Callable[[T], None]


@dataclass
class _Finish:
    then: Callable[[], None]


@dataclass
class Slot:
    """One image's entries, in the order they are to be played; `restore`: its tags to put back if it fails."""

    name: str
    restore: dict[str, str | None] = field(default_factory=dict)
    entries: deque[_Say | _Wait[object] | _Finish] = field(default_factory=deque)


class Journal:
    def __init__(self, engine: Engine, say: Say, restore: Restore, max_workers: int | None = None) -> None:
        self.engine, self._say, self._restore = engine, say, restore
        self._slots: deque[Slot] = deque()
        self._max = max_workers or workers()
        self._pool: ThreadPoolExecutor | None = None  # made on the first smoke (--no-smoke and reuse need none)
        self._local = threading.local()
        self._forks: list[Engine] = []
        self._forks_lock = threading.Lock()
        self._broken = False  # an entry raised: nothing after it may be played (no later tag moves)

    # -- adding entries (calling thread) ------------------------------------
    def open(self, name: str) -> Slot:
        slot = Slot(name)
        self._slots.append(slot)
        return slot

    def say(self, slot: Slot, text: str) -> None:
        slot.entries.append(_Say(text))
        self.pump()

    def submit(self, slot: Slot, work: Callable[[Engine], T], then: Callable[[T], None]) -> None:
        """Run `work(engine)` in a worker now; `then(its result)` is played in the slot's turn."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max, thread_name_prefix="imgbuild-smoke")
        future = self._pool.submit(self._work, work)
        slot.entries.append(_Wait(future, then))  # type: ignore[arg-type]
        self.pump()

    def finish(self, slot: Slot, then: Callable[[], None]) -> None:
        """The slot's last entry; once played, the image is final and no longer restored."""
        slot.entries.append(_Finish(then))
        self.pump()

    # -- playing (calling thread) -------------------------------------------
    def pump(self, *, block: bool = False) -> None:
        """Play entries from the first unfinished slot on; without `block`, stop at a smoke still running.

        A slot whose entries are played but has no finish yet (it is still being built) stops it too.
        """
        while self._slots and not self._broken:
            slot = self._slots[0]
            while slot.entries:
                entry = slot.entries[0]
                if isinstance(entry, _Wait) and not block and not entry.future.done():
                    return
                slot.entries.popleft()
                try:
                    self._play(entry)
                except BaseException:
                    self._broken = True
                    raise
                if isinstance(entry, _Finish):
                    slot.restore = {}
                    self._slots.popleft()
                    break
            else:
                return

    def _play(self, entry: _Say | _Wait[object] | _Finish) -> None:
        if isinstance(entry, _Say):
            self._say(entry.text)
        elif isinstance(entry, _Wait):
            entry.then(entry.future.result())  # a worker's exception is raised here, in its turn
        else:
            entry.then()

    def drain(self) -> None:
        """Play everything added so far, waiting for the smokes (the slots before one still being built)."""
        self.pump(block=True)

    def close(self) -> None:
        """After a drain: no smoke runs any more."""
        self._stop(wait=True)

    def abort(self) -> None:
        """A failure or an interrupt: stop the smokes, remove their containers, put back every slot not finalised."""
        try:
            for slot in self._slots:
                for entry in slot.entries:
                    if isinstance(entry, _Wait):
                        entry.future.cancel()
            if self._pool is not None:
                self.engine.remove_own_containers()  # a running smoke's wait returns; its worker ends
            self._stop(wait=True)
            if self._pool is not None:
                self.engine.remove_own_containers()  # one a worker made after the first sweep
        finally:
            for slot in self._slots:
                self._restore(slot.restore)
            self._slots.clear()

    def _stop(self, *, wait: bool) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
        with self._forks_lock:
            forks, self._forks = self._forks, []
        for engine in forks:
            engine.close()

    # -- worker threads -------------------------------------------------------
    def _work(self, work: Callable[[Engine], T]) -> T:
        engine: Engine | None = getattr(self._local, "engine", None)
        if engine is None:
            engine = self._local.engine = self.engine.fork()
            with self._forks_lock:
                self._forks.append(engine)
        return work(engine)
