"""The loader's skip list (patch 0007 model_loader/weight_utils.py).

The weights iterators are the patched functions; ``safe_open`` and the other
file readers are stand-ins that record which tensors get read.

Only a load of the real checkpoint shows that the model finishes loading with
the tables skipped (no parameter left unloaded, none unexpected).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

from tests.support import needs

torch = needs.module("torch", "release", "the SM12x and Engram patch tests run the patched code on CPU torch")

pytestmark = pytest.mark.release

WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"
EP_FILTER = "vllm/model_executor/model_loader/ep_weight_filter.py"
ENGRAM = "vllm/models/deepseek_v41/common/engram.py"

try:  # weight_utils imports `regex as re`; the patterns are plain re syntax.
    import regex as re
except ImportError:  # pragma: no cover - depends on the machine
    import re

SKIPPED = [
    "layers.1.engram.embed.weight",  # checkpoint names
    "layers.1.engram.embed.scale",
    "layers.14.engram.embed.weight",
    "layers.14.engram.embed.scale",
    "model.layers.14.engram.embed_tokens.weight",  # after the weights mapper
    "model.layers.14.engram.embed_tokens.weight_scale_inv",
    "language_model.model.layers.1.engram.embed_tokens.weight",
]
KEPT = [
    "layers.1.engram.wkv.weight",
    "layers.1.engram.wkv.scale",
    "layers.1.engram.q_weight",
    "layers.1.engram.k_weight",
    "embed.weight",
    "model.embed_tokens.weight",
    "layers.1.attn.wq_a.weight",
    "layers.2.ffn.experts.7.w1.weight",
    "ple.ple_embedding.ngram_embedding.shard_0.weight",  # another model's table
    "layers.1.engram.embed.weight.extra",
]


class Tqdm:
    def __init__(self, iterable=None, **kwargs) -> None:
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)


class SafeOpen:
    """``safe_open`` over an in-memory checkpoint, recording reads."""

    files: ClassVar[dict[str, dict[str, torch.Tensor]]] = {}
    reads: ClassVar[list[str]] = []

    def __init__(self, path, framework="pt", device="cpu") -> None:
        self.tensors = self.files[path]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None: ...

    def keys(self):
        return list(self.tensors)

    def get_tensor(self, name: str) -> torch.Tensor:
        self.reads.append(name)
        return self.tensors[name]


@pytest.fixture(scope="module")
def weight_utils(patched_source):
    ep = patched_source.load(EP_FILTER, ["_EXPERT_ID_RE", "parse_expert_id", "should_skip_weight"], {"re": re})
    namespace = dict(
        os=os,
        re=re,
        torch=torch,
        tqdm=Tqdm,
        enable_tqdm=lambda use: False,
        logger=SimpleNamespace(info_once=print, warning_once=print, info=print),
        safe_open=SafeOpen,
        # A shard file's bytes are its own path (see `checkpoint`).
        load=lambda data: dict(SafeOpen.files[data.decode()]),
        load_file=lambda path, device="cpu": dict(SafeOpen.files[path]),
        should_skip_weight=ep["should_skip_weight"],
        _get_fs_type=lambda files: "ext4",
        _get_checkpoints_size_bytes=lambda files: 0,
        get_available_memory=lambda: 1 << 40,  # vllm.utils.cpu_resource_utils (0.34.0)
        _BAR_FORMAT="",
        DEFAULT_SAFETENSORS_PREFETCH_NUM_THREADS=4,
        DEFAULT_SAFETENSORS_PREFETCH_BLOCK_SIZE=1 << 20,
        concurrent=__import__("concurrent.futures"),
        inspect=inspect,
        current_platform=SimpleNamespace(is_cuda_alike=lambda: False),
    )
    loaded = patched_source.load(
        WEIGHT_UTILS,
        [
            "_ENGRAM_DISK_ENV",
            "_ENGRAM_DISK_TABLE_RE",
            "engram_tables_on_disk",
            "skip_engram_table_on_disk",
            "_without_engram_tables_on_disk",
            "_natural_sort_key",
            "safetensors_weights_iterator",
            "multi_thread_safetensors_weights_iterator",
            "runai_safetensors_weights_iterator",
            "pt_weights_iterator",
        ],
        namespace,
    )
    return loaded


@pytest.fixture
def checkpoint(tmp_path):
    """Two shards mixing Engram tables with ordinary weights."""
    names = SKIPPED[:4] + KEPT
    shards = {
        str(tmp_path / "model-00001-of-00002.safetensors"): names[::2],
        str(tmp_path / "model-00002-of-00002.safetensors"): names[1::2],
    }
    SafeOpen.files = {
        path: {name: torch.full((2,), float(i)) for i, name in enumerate(shard)} for path, shard in shards.items()
    }
    SafeOpen.reads = []
    for path in shards:
        Path(path).write_bytes(path.encode())
    return sorted(shards)


@pytest.mark.parametrize("value", ["1", "true", "on"])
def test_skip_list_with_engram_on_disk(weight_utils, monkeypatch, value):
    monkeypatch.setenv("DSV41_ENGRAM_DISK", value)
    skip = weight_utils["skip_engram_table_on_disk"]
    assert [name for name in SKIPPED if not skip(name)] == []
    assert [name for name in KEPT if skip(name)] == []


@pytest.mark.parametrize("value", [None, "", "0", "false"])
def test_nothing_is_skipped_without_the_flag(weight_utils, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("DSV41_ENGRAM_DISK", raising=False)
    else:
        monkeypatch.setenv("DSV41_ENGRAM_DISK", value)
    skip = weight_utils["skip_engram_table_on_disk"]
    assert not any(skip(name) for name in SKIPPED + KEPT)


def test_loader_and_model_read_the_flag_alike(weight_utils, patched_source, monkeypatch):
    engram = patched_source.load(ENGRAM, ["ENGRAM_DISK_ENV", "engram_disk_enabled"], {"os": os})
    assert weight_utils["_ENGRAM_DISK_ENV"] == engram["ENGRAM_DISK_ENV"]
    for value in ["", "0", "1", "yes", "TRUE", " on ", "2", "off"]:
        monkeypatch.setenv("DSV41_ENGRAM_DISK", value)
        assert weight_utils["engram_tables_on_disk"]() == engram["engram_disk_enabled"](), value


def test_safetensors_loader_never_reads_the_tables(weight_utils, checkpoint, monkeypatch):
    monkeypatch.setenv("DSV41_ENGRAM_DISK", "1")
    names = [name for name, _ in weight_utils["safetensors_weights_iterator"](checkpoint, False)]
    assert sorted(names) == sorted(KEPT)
    assert sorted(SafeOpen.reads) == sorted(KEPT)  # the tables were never read

    monkeypatch.delenv("DSV41_ENGRAM_DISK")
    SafeOpen.reads = []
    names = [name for name, _ in weight_utils["safetensors_weights_iterator"](checkpoint, False)]
    assert sorted(names) == sorted(SKIPPED[:4] + KEPT)


def test_other_safetensors_strategies_skip_the_tables(weight_utils, checkpoint, monkeypatch):
    monkeypatch.setenv("DSV41_ENGRAM_DISK", "1")
    # Eager and multi-threaded loading read whole files; the tables are
    # dropped before they reach the model.
    eager = weight_utils["safetensors_weights_iterator"]
    assert sorted(name for name, _ in eager(checkpoint, False, "eager")) == sorted(KEPT)
    threaded = weight_utils["multi_thread_safetensors_weights_iterator"]
    assert sorted(name for name, _ in threaded(checkpoint, False)) == sorted(KEPT)


def test_pt_loader_skips_the_tables(weight_utils, checkpoint, monkeypatch):
    monkeypatch.setenv("DSV41_ENGRAM_DISK", "1")

    class Torch:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def load(path, map_location=None, weights_only=True):
            return dict(SafeOpen.files[path])

    monkeypatch.setitem(weight_utils, "torch", Torch())
    names = [name for name, _ in weight_utils["pt_weights_iterator"](checkpoint, False)]
    assert sorted(names) == sorted(KEPT)


class Streamer:
    """runai-model-streamer's ``SafetensorsStreamer`` over the in-memory
    checkpoint; ``OWNED`` says whether its ``stream_files`` takes ``owned``
    (0.17.0 and later: it hands out tensors the caller may keep)."""

    OWNED = True
    streamed: ClassVar[list[dict]] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None: ...

    def _stream(self, files, device="cpu", is_distributed=False, **kwargs) -> None:
        self.streamed.append(kwargs)
        self.files = files
        self.files_to_tensors_metadata = {path: list(SafeOpen.files[path]) for path in files}

    def get_tensors(self):
        for path in self.files:
            yield from SafeOpen.files[path].items()

    def __getattr__(self, name):
        if name != "stream_files":
            raise AttributeError(name)

        if self.OWNED:

            def stream_files(files, device="cpu", is_distributed=False, owned=False):
                self._stream(files, device, is_distributed, owned=owned)

        else:

            def stream_files(files, device="cpu", is_distributed=False):
                self._stream(files, device, is_distributed)

        return stream_files


@pytest.mark.parametrize("owned", [True, False])
def test_runai_streamer_skips_the_tables_before_copying_them(weight_utils, checkpoint, monkeypatch, owned):
    """0.34.0 keeps the streamer's tensors when it can hand them out (`owned`)
    and clones them otherwise; the tables are dropped before either."""
    monkeypatch.setenv("DSV41_ENGRAM_DISK", "1")
    monkeypatch.setattr(Streamer, "OWNED", owned)
    Streamer.streamed = []
    monkeypatch.setitem(weight_utils, "SafetensorsStreamer", Streamer)
    cloned = []

    class Clone(torch.Tensor):
        def clone(self, *args, **kwargs):
            cloned.append(self)
            return super().clone(*args, **kwargs)

    for shard in SafeOpen.files.values():
        for name in shard:
            shard[name] = shard[name].as_subclass(Clone)
    runai = weight_utils["runai_safetensors_weights_iterator"]
    names = [name for name, _ in runai(checkpoint, False)]
    assert sorted(names) == sorted(KEPT)
    assert Streamer.streamed == [{"owned": True} if owned else {}]
    assert len(cloned) == (0 if owned else len(KEPT))  # never a table

    monkeypatch.delenv("DSV41_ENGRAM_DISK")
    assert sorted(name for name, _ in runai(checkpoint, False)) == sorted(SKIPPED[:4] + KEPT)
