"""lazy.module: a module runs when one of its attributes is first read, not when it is named."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from imgbuild import lazy


def test_a_lazy_module_runs_on_first_attribute_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"  # the module appends a line each time it runs
    (tmp_path / "imgbuild_lazy_probe.py").write_text(
        f"with open({str(runs)!r}, 'a') as f:\n    f.write('ran\\n')\nVALUE = 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "imgbuild_lazy_probe", raising=False)
    probe = lazy.module("imgbuild_lazy_probe")
    assert not runs.exists()  # named, not run
    assert lazy.module("imgbuild_lazy_probe") is probe
    assert probe.VALUE == 42
    assert probe.VALUE == 42
    assert runs.read_text() == "ran\n"  # once


def test_an_imported_module_is_returned_as_it_is() -> None:
    import json

    assert lazy.module("json") is json


def test_a_missing_module_is_refused_at_once() -> None:
    with pytest.raises(ModuleNotFoundError, match="imgbuild_no_such_module"):
        lazy.module("imgbuild_no_such_module")


def test_threads_that_first_read_a_lazy_module_together_find_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "imgbuild_lazy_slow.py").write_text("import time\n\ntime.sleep(0.2)\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "imgbuild_lazy_slow", raising=False)
    slow = lazy.module("imgbuild_lazy_slow")
    found: list[object] = []

    def read() -> None:
        found.append(getattr(lazy.loaded(slow), "VALUE", "missing"))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == [42, 42, 42, 42]
