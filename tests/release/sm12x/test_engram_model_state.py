"""Staging Engram rows in prepare_inputs (patch 0006 nvidia/model_state.py).

``DeepseekV41ModelState`` is the patched class on a stand-in base
(``DefaultModelState``); the lookback gather kernel is replaced by a torch
transcription of it, and the stager by a recorder, except where the patched
``EngramDiskStager.create`` decides whether there is a stager at all.

Only a GB10 shows that the V2 runner's forward, eager and replayed from a
graph, reads the rows staged here, and what the host sync in prepare_inputs
costs per step.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest

from tests.support import needs

torch = needs.module("torch", "release", "the SM12x and Engram patch tests run the patched code on CPU torch")

pytestmark = pytest.mark.release

MODEL_STATE = "vllm/models/deepseek_v41/nvidia/model_state.py"
ENGRAM = "vllm/models/deepseek_v41/common/engram.py"
DEPTH = 3


class DefaultModelState:
    """Stands for vLLM's DefaultModelState: the attributes the subclass
    reads, and 1-D positions (no mrope) from prepare_inputs."""

    base_inputs: ClassVar[dict] = {}

    def __init__(self, vllm_config, model, encoder_cache, device) -> None:
        self.vllm_config = vllm_config
        self.model = model
        self.device = device
        self.max_num_reqs = 4
        self.max_num_tokens = 32

    def prepare_inputs(self, input_batch, req_states) -> dict:
        return dict(self.base_inputs)

    def prepare_dummy_inputs(self, num_reqs, num_tokens) -> dict:
        return {}


class GatherLookback:
    """``_gather_lookback_kernel[grid](...)``, transcribed to torch."""

    def __getitem__(self, grid):
        def launch(window, idx_mapping, qsl, positions, all_ids, stride, num_reqs, DEPTH, BLOCK_DEPTH):
            for row in range(grid[0]):
                window[row].fill_(-1)
                if row >= num_reqs or qsl[row + 1] <= qsl[row]:
                    continue
                computed = int(positions[int(qsl[row])])
                for offset in range(DEPTH):
                    position = computed - 1 - offset
                    if position >= 0:
                        window[row, offset] = all_ids[int(idx_mapping[row]), position]

        return launch


class Stager:
    def __init__(self, engram_runs: bool = True) -> None:
        self.calls: list[tuple] = []
        self.engram_runs = engram_runs
        self.disarmed = 0

    def forward_uses_engram(self) -> bool:
        return self.engram_runs

    def disarm(self) -> None:
        self.disarmed += 1

    def stage(self, input_ids, positions, query_start_loc, lookback_token_ids, num_tokens) -> None:
        self.calls.append((input_ids, positions, query_start_loc, lookback_token_ids.clone(), num_tokens))


def load_state(patched_source, create):
    return patched_source.load(
        MODEL_STATE,
        ["DeepseekV41ModelState"],
        {
            "DefaultModelState": DefaultModelState,
            "torch": torch,
            "np": np,
            "triton": SimpleNamespace(next_power_of_2=lambda n: 1 << (n - 1).bit_length()),
            "_gather_lookback_kernel": GatherLookback(),
            "UvaBufferPool": lambda *args: None,
            "EngramDiskStager": SimpleNamespace(create=create),
        },
    )["DeepseekV41ModelState"]


def make_state(cls, depth: int = DEPTH):
    vllm_config = SimpleNamespace(
        parallel_config=SimpleNamespace(prefill_context_parallel_size=1),
        compilation_config=SimpleNamespace(cudagraph_decoder_replay=False),
    )
    model = SimpleNamespace(token_lookback_depth=depth)
    return cls(vllm_config, model, None, torch.device("cpu"))


def batch():
    """Two requests: a prefill chunk from position 4 and a decode at 9."""
    all_ids = torch.arange(100, 100 + 2 * 16, dtype=torch.int32).view(2, 16)
    input_batch = SimpleNamespace(
        idx_mapping=torch.tensor([1, 0]),
        query_start_loc=torch.tensor([0, 3, 4], dtype=torch.int32),
        positions=torch.tensor([4, 5, 6, 9, 0, 0]),  # padded to 6
        input_ids=torch.tensor([7, 8, 9, 10, 0, 0], dtype=torch.int32),
        num_tokens=4,
    )
    req_states = SimpleNamespace(all_token_ids=SimpleNamespace(gpu=all_ids))
    return input_batch, req_states, all_ids


def test_stager_is_created_with_the_model(patched_source):
    created = []

    def create(model):
        created.append(model)
        return Stager()

    cls = load_state(patched_source, create)
    state = make_state(cls)
    assert created == [state.model]
    assert isinstance(state.engram_disk_stager, Stager)
    # No Engram (no lookback window): no stager asked for.
    created.clear()
    assert make_state(cls, depth=0).engram_disk_stager is None
    assert created == []


def test_rows_are_staged_after_the_lookback_gather(patched_source):
    cls = load_state(patched_source, lambda model: Stager())
    state = make_state(cls)
    input_batch, req_states, all_ids = batch()
    inputs = state.prepare_inputs(input_batch, req_states)

    window = inputs["lookback_token_ids"]
    assert window is state.lookback_token_ids
    expected = torch.full_like(window, -1)
    expected[0] = all_ids[1, [3, 2, 1]]  # request in slot 1, chunk at 4
    expected[1] = all_ids[0, [8, 7, 6]]  # request in slot 0, decode at 9
    assert torch.equal(window, expected)

    [(input_ids, positions, query_start_loc, staged_window, checked)] = state.engram_disk_stager.calls
    assert input_ids is input_batch.input_ids  # the padded ids the forward hashes
    assert positions is input_batch.positions
    assert query_start_loc is input_batch.query_start_loc
    assert torch.equal(staged_window, expected)  # the gather ran first
    assert checked == 4  # the forward checks the real tokens, not the padding


def test_nothing_is_staged_when_the_forward_skips_engram(patched_source):
    """The profile run (KV cache unbound): the forward skips Engram, so the
    state does not call stage(), which would raise. Since 0.34.0 that forward
    still hands the layers dummy hash ids (nvidia/model.py, "the memory
    profile also has to see the Engram activations"), so the state disarms
    the check: dummy ids are not another step's rows."""
    cls = load_state(patched_source, lambda model: Stager(engram_runs=False))
    state = make_state(cls)
    input_batch, req_states, _ = batch()
    inputs = state.prepare_inputs(input_batch, req_states)
    assert state.engram_disk_stager.calls == []
    assert state.engram_disk_stager.disarmed == 1
    assert inputs["lookback_token_ids"] is state.lookback_token_ids


def test_rows_are_staged_after_a_subclass_fills_the_lookback(patched_source):
    """0.34.0 moved the gather into the ``_fill_lookback`` hook, which the
    specialized decode's model state overrides: it joins a gather issued on a
    side stream beside its metadata graph instead of gathering again. The
    rows are staged after that hook, from the window it leaves, whoever
    filled it."""
    base = load_state(patched_source, lambda model: Stager())
    order = []

    class SideStreamState(base):
        def _fill_lookback(self, input_batch, req_states):
            order.append("fill")
            self.lookback_token_ids.fill_(42)  # stands for the joined side-stream gather

    state = make_state(SideStreamState)
    stager = state.engram_disk_stager
    real_stage = stager.stage
    stager.stage = lambda *args: (order.append("stage"), real_stage(*args))
    input_batch, req_states, _ = batch()
    inputs = state.prepare_inputs(input_batch, req_states)
    assert order == ["fill", "stage"]
    [(_, _, _, staged_window, _)] = stager.calls
    assert bool((staged_window == 42).all())
    assert inputs["lookback_token_ids"] is state.lookback_token_ids


def test_capture_inputs_disarm_the_stale_row_check(patched_source):
    """CUDA graph capture hashes dummy tokens nothing staged."""
    cls = load_state(patched_source, lambda model: Stager())
    state = make_state(cls)
    state.prepare_dummy_inputs(2, 8)
    assert state.engram_disk_stager.disarmed == 1


def test_staging_uses_the_positions_the_forward_gets(patched_source):
    cls = load_state(patched_source, lambda model: Stager())
    state = make_state(cls)
    input_batch, req_states, _ = batch()
    own = torch.tensor([4, 5, 6, 9, 9, 9])
    state.base_inputs = {"positions": own}
    state.prepare_inputs(input_batch, req_states)
    assert state.engram_disk_stager.calls[0][1] is own


def test_without_the_flag_there_is_no_stager(patched_source, monkeypatch):
    """The patched EngramDiskStager.create decides: flag unset, no stager,
    and prepare_inputs returns what the release returns."""
    engram = patched_source.load(
        ENGRAM,
        ["ENGRAM_DISK_ENV", "engram_disk_enabled", "EngramDiskStager"],
        {"os": os},
    )
    monkeypatch.delenv("DSV41_ENGRAM_DISK", raising=False)
    cls = load_state(patched_source, engram["EngramDiskStager"].create)
    state = make_state(cls)
    assert state.engram_disk_stager is None
    input_batch, req_states, _ = batch()
    inputs = state.prepare_inputs(input_batch, req_states)
    assert set(inputs) == {"lookback_token_ids"}
