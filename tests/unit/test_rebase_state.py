"""`state.json` of a rebase in progress survives an upgrade of imgbuild: what an earlier imgbuild wrote loads, and
is written back byte for byte (tests/unit/data/rebase-state-*.json were written by the `to_json()` this replaced,
at commit 860edb0: a rebase stopped at a conflict, and one writing its result)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgbuild.workflows.rebase.state import PatchResult, RebaseState, Row, Stopped, loaded, saved

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["rebase-state-stopped.json", "rebase-state-committing.json"])
def test_an_older_state_loads_and_is_written_back_the_same(name: str) -> None:
    text = (DATA / name).read_text(encoding="utf-8")
    state = loaded(json.loads(text))
    assert isinstance(state, RebaseState) and all(isinstance(r, PatchResult) for r in state.results)
    assert json.dumps(saved(state), indent=2, sort_keys=True) + "\n" == text  # atomic.write_json's form


def test_the_stopped_state_keeps_its_records() -> None:
    state = loaded(json.loads((DATA / "rebase-state-stopped.json").read_text(encoding="utf-8")))
    assert state.status == "stopped" and isinstance(state.stopped, Stopped)
    assert state.stopped.filename == state.current.filename == "0001-cuda-sm121.patch"
    assert [r.outcome for r in state.results] == ["exact"] and not state.rows


def test_the_committing_state_keeps_its_rows() -> None:
    state = loaded(json.loads((DATA / "rebase-state-committing.json").read_text(encoding="utf-8")))
    assert state.status == "committing" and all(isinstance(r, Row) for r in state.rows)
    moved = [r for r in state.results if r.moves]
    assert moved and moved[0].moves[0]["how"] and any(r.dropped_hunks for r in state.results)


def test_a_state_without_a_required_key_is_refused() -> None:
    data = json.loads((DATA / "rebase-state-stopped.json").read_text(encoding="utf-8"))
    del data["ref"]
    with pytest.raises(ValueError, match="ref"):
        loaded(data)
