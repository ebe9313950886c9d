"""The smoke journal's order, without a daemon: work runs in threads, its outcome is played in plan order.

The worker functions here ignore the Engine they are handed (a fork of one that never connects);
what runs on a real engine, and what an interrupt leaves, is in tests/docker/test_smoke_order.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from imgbuild.errors import SmokeError
from imgbuild.images.docker import Engine
from imgbuild.images.smokequeue import Journal


def journal(said: list[str], restored: list[dict[str, str | None]]) -> Journal:
    return Journal(Engine(None, "docker"), said.append, restored.append, max_workers=2)


def test_a_later_images_lines_wait_for_the_earlier_images_outcome() -> None:
    said: list[str] = []
    release = threading.Event()
    j = journal(said, [])
    first, second = j.open("a"), j.open("b")
    j.say(first, "a: building")
    j.submit(first, lambda _e: release.wait(10) and "a report", lambda r: said.append(f"a took {r}"))
    j.finish(first, lambda: said.append("a: tags moved"))
    j.say(second, "b: building")
    j.submit(second, lambda _e: "b report", lambda r: said.append(f"b took {r}"))
    j.finish(second, lambda: said.append("b: tags moved"))
    assert said == ["a: building"]  # b finished its work first, but a's turn has not come
    release.set()
    j.drain()
    j.close()
    assert said == [
        *("a: building", "a took a report", "a: tags moved"),
        *("b: building", "b took b report", "b: tags moved"),
    ]


def test_a_failing_outcome_stops_every_later_entry_and_restores_the_unfinished(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")  # abort's container sweep finds no daemon
    said: list[str] = []
    restored: list[dict[str, str | None]] = []
    j = journal(said, restored)
    first, second = j.open("a"), j.open("b")
    first.restore, second.restore = {"r:a": None}, {"r:b": "sha256:old"}

    def fails(_report: str) -> None:
        raise SmokeError("a failed its smoke test")

    release = threading.Event()
    j.submit(first, lambda _e: release.wait(10) and "a report", fails)
    j.finish(first, lambda: said.append("a: tags moved"))
    j.say(second, "b: building")
    j.finish(second, lambda: said.append("b: tags moved"))
    release.set()
    with pytest.raises(SmokeError, match="a failed"):
        j.drain()
    j.drain()  # nothing after the failure is played, not even on a second drain
    j.abort()
    assert said == [] and restored == [{"r:a": None}, {"r:b": "sha256:old"}]


def test_a_workers_exception_is_raised_in_its_turn() -> None:
    said: list[str] = []
    j = journal(said, [])
    slot = j.open("a")

    release = threading.Event()

    def broken(_e: Engine) -> str:
        release.wait(10)
        raise RuntimeError("daemon went away")

    j.submit(slot, broken, said.append)
    j.finish(slot, lambda: said.append("moved"))
    release.set()
    with pytest.raises(RuntimeError, match="daemon went away"):
        j.drain()
    j.close()
    assert said == []
