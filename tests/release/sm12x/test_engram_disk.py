"""Engram-on-disk (patch 0005, vllm/models/deepseek_v41/common/engram.py).

The row files, each rank's shard offset, the parallel reads on the shared
pool, the staging into buffers allocated once, the checkpoint export, and the
SM 12.1 lookup thresholds. ``ParallelEngramEmbedding``, ``Engram`` and
``NgramHashState`` are the patched classes themselves; only their distributed
and CUDA helpers are stand-ins. The Triton kernels (hashing, dequantizing) do
not run here.

Only a GB10 shows: the hash and dequantize kernels on the staged buffers, the
ordering of the pinned copies on the real stream, the per-step NVMe read
latency, and that a captured forward makes no host round-trip.
"""

from __future__ import annotations

import ctypes
import glob
import inspect
import itertools
import json
import mmap
import os
import re
import sys
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest

from tests.support import needs

torch = needs.module("torch", "release", "the SM12x and Engram patch tests run the patched code on CPU torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

pytestmark = pytest.mark.release

ENGRAM = "vllm/models/deepseek_v41/common/engram.py"

# Seven prime-sized hash heads, like EngramLayout's; the table has a few
# trailing rows no head uses, as a checkpoint table may.
HEAD_SIZES = (101, 103, 107, 109, 113, 127, 131)
NUM_ROWS = sum(HEAD_SIZES) + 9
DIM = 64
QUANT_BLOCK = 32
LAYER_IDS = (1, 14)
HEAD_OFFSETS = np.cumsum((0, *HEAD_SIZES[:-1]))


class _Logger:
    def info(self, *args, **kwargs) -> None: ...
    def info_once(self, *args, **kwargs) -> None: ...
    def warning(self, *args, **kwargs) -> None: ...
    def warning_once(self, *args, **kwargs) -> None: ...


class TorchProxy:
    """Real torch, with the CUDA device queries of a 48-SM GPU."""

    def __init__(self, **overrides) -> None:
        self.__dict__.update(overrides)

    def __getattr__(self, name: str):
        return getattr(torch, name)


def _cpu_torch(**overrides) -> TorchProxy:
    cuda = SimpleNamespace(
        is_available=lambda: False,
        get_device_properties=lambda index: SimpleNamespace(multi_processor_count=48),
    )
    accelerator = SimpleNamespace(current_device_index=lambda: 0)
    return TorchProxy(cuda=cuda, accelerator=accelerator, **overrides)


DISK_NAMES = (
    "ENGRAM_DISK_ENV",
    "ENGRAM_DIR_ENV",
    "ENGRAM_IO_THREADS_ENV",
    "ENGRAM_IO_THREADS_DEFAULT",
    "engram_disk_enabled",
    "engram_disk_dir",
    "engram_table_paths",
    "_engram_io_pool",
    "_engram_io_pool_lock",
    "engram_io_pool",
    "ENGRAM_ROWS_PER_TASK",
    "_ENGRAM_PAGE",
    "ENGRAM_PROBE_ROWS",
    "ENGRAM_PROBE_ROWS_LARGE",
    "_ENGRAM_PROBE_MIX",
    "ENGRAM_MERGE_GAP_PAGES",
    "ENGRAM_HINT_PAGES",
    "ENGRAM_HINTS_PER_TASK",
    "ENGRAM_PREFETCH_MODE",
    "refuse_engram_disk_modes",
    "engram_table_meta_path",
    "_ENGRAM_DISK_DTYPES",
    "_engram_io_workers",
    "engram_gather_spans",
    "_check_engram_table_meta",
    "_engram_libc",
    "_libc",
    "_close_fds",
    "EngramDiskTable",
    "EngramDiskSlot",
    "EngramStaleRowsError",
    "EngramDiskStager",
    "_ENGRAM_CHECKPOINT_TABLE",
    "_ONE_BYTE_SAFETENSORS_DTYPES",
    "export_engram_tables",
    "_engram_head_shard_weight_loader",
    "ParallelEngramEmbedding",
    "NgramHashState",
    "Engram",
    "DEAD_ID",
)


class Distributed:
    """The TP rank a ParallelEngramEmbedding is built on."""

    tp_size = 1
    tp_rank = 0


@pytest.fixture(scope="module")
def engram(patched_source):
    def engram_dp_size() -> int:
        raise AssertionError("Engram-on-disk must not shard over DP")

    namespace = dict(
        os=os,
        np=np,
        ctypes=ctypes,
        mmap=mmap,
        torch=_cpu_torch(),
        nn=torch.nn,
        threading=threading,
        weakref=weakref,
        glob=glob,
        json=json,
        re=re,
        Future=Future,
        ThreadPoolExecutor=ThreadPoolExecutor,
        logger=_Logger(),
        triton=SimpleNamespace(cdiv=lambda a, b: -(-a // b)),
        get_engram_dp_size=engram_dp_size,
        get_tensor_model_parallel_world_size=lambda: Distributed.tp_size,
        get_tensor_model_parallel_rank=lambda: Distributed.tp_rank,
        eager_break_during_capture=lambda fn: fn,
        set_weight_attrs=None,
    )
    return patched_source.load(ENGRAM, DISK_NAMES, namespace)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Two layers' tables as exported row files, plus their contents."""
    directory = tmp_path_factory.mktemp("engram")
    rng = np.random.default_rng(20261129)
    contents = {}
    for layer_id in LAYER_IDS:
        values = rng.integers(0, 256, (NUM_ROWS, DIM), dtype=np.uint8)
        scales = rng.integers(0, 256, (NUM_ROWS, DIM // QUANT_BLOCK), dtype=np.uint8)
        stem = directory / f"layers.{layer_id}.engram.embed"
        values.tofile(f"{stem}.weight.bin")
        scales.tofile(f"{stem}.scale.bin")
        write_meta(directory, layer_id, NUM_ROWS)
        contents[layer_id] = (values, scales)
    return directory, contents


def write_meta(directory, layer_id: int, rows: int, weight_dtype: str = "F8_E4M3") -> None:
    """The dtype and shape record export_engram_tables writes beside the rows."""
    meta = {
        "weight": {"dtype": weight_dtype, "shape": [rows, DIM]},
        "scale": {"dtype": "F8_E8M0", "shape": [rows, DIM // QUANT_BLOCK]},
    }
    (Path(directory) / f"layers.{layer_id}.engram.embed.json").write_text(json.dumps(meta))


@pytest.fixture
def disk_env(monkeypatch, tables):
    directory, _ = tables
    monkeypatch.setenv("DSV41_ENGRAM_DISK", "1")
    monkeypatch.setenv("DSV41_ENGRAM_DIR", str(directory))
    return directory


def make_embedding(engram, layer_id: int, tp_size: int, tp_rank: int):
    """The patched ParallelEngramEmbedding as TP rank `tp_rank` builds it, with
    the engram config's usual host-offload settings left on."""
    Distributed.tp_size, Distributed.tp_rank = tp_size, tp_rank
    return engram["ParallelEngramEmbedding"](
        NUM_ROWS,
        DIM,
        HEAD_SIZES,
        block_size=QUANT_BLOCK,
        cpu_offload=True,
        dp_shared_memory=True,
        use_thp=True,
        disk_layer_id=layer_id,
    )


def random_hashes(rng, num_tokens: int) -> np.ndarray:
    """[tokens, heads] hash ids: each head's bucket range, some repeats, and
    dead (-1) tokens like the dummy hashes of idle DP ranks."""
    buckets = rng.integers(0, min(HEAD_SIZES), (num_tokens, len(HEAD_SIZES)))
    hashes = (buckets + HEAD_OFFSETS).astype(np.int32)
    if num_tokens > 4:
        hashes[1] = hashes[0]  # the same n-gram twice
        hashes[3] = -1
    return hashes


def expected_rows(embedding, hashes: np.ndarray) -> list[list[int | None]]:
    """The table row each (token, local head) needs, None where the kernel
    writes zeros (another rank's head, a padded head, a dead token)."""
    rows = []
    for token_hashes in hashes:
        per_head = []
        for j in range(embedding.part_n_hash_cols):
            head = embedding.head_start + j
            value = int(token_hashes[head]) if head < len(HEAD_SIZES) else -1
            owned = embedding.vocab_start_idx <= value < embedding.vocab_end_idx
            per_head.append(value if owned else None)
        rows.append(per_head)
    return rows


# --------------------------------------------------------------------------


def test_disk_flag_and_directory(engram, monkeypatch, tmp_path):
    enabled = engram["engram_disk_enabled"]
    for value, expect in [
        (None, False),
        ("", False),
        ("0", False),
        ("no", False),
        ("1", True),
        ("true", True),
        ("ON", True),
    ]:
        if value is None:
            monkeypatch.delenv("DSV41_ENGRAM_DISK", raising=False)
        else:
            monkeypatch.setenv("DSV41_ENGRAM_DISK", value)
        assert enabled() is expect, value

    monkeypatch.delenv("DSV41_ENGRAM_DIR", raising=False)
    with pytest.raises(RuntimeError, match="DSV41_ENGRAM_DIR"):
        engram["engram_disk_dir"]()
    monkeypatch.setenv("DSV41_ENGRAM_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError):
        engram["engram_disk_dir"]()
    monkeypatch.setenv("DSV41_ENGRAM_DIR", str(tmp_path))
    assert engram["engram_disk_dir"]() == str(tmp_path)
    assert engram["engram_table_paths"]("/nvme/engram", 14) == (
        "/nvme/engram/layers.14.engram.embed.weight.bin",
        "/nvme/engram/layers.14.engram.embed.scale.bin",
    )


@pytest.mark.parametrize("tp_size", [1, 2, 4])
def test_each_rank_reads_its_own_shard_at_its_offset(engram, disk_env, tables, tp_size):
    """Every rank's disk shard holds exactly the rows the release's in-memory
    weight loader would copy into that rank's parameter."""
    _, contents = tables
    values, scales = contents[LAYER_IDS[0]]
    full_weight = torch.from_numpy(values).view(torch.float8_e4m3fn)
    full_scales = torch.from_numpy(scales).view(torch.float8_e8m0fnu)
    load = engram["_engram_head_shard_weight_loader"]
    covered = []
    for rank in range(tp_size):
        embedding = make_embedding(engram, LAYER_IDS[0], tp_size, rank)
        table = embedding.disk_table
        assert table is not None
        assert list(embedding.parameters()) == []  # nothing for the loader
        assert embedding.dp_size == 1 and not embedding.cpu_offload
        assert table.row_start == embedding.vocab_start_idx
        assert table.part_rows == embedding.part_num_embeddings
        covered.append((embedding.vocab_start_idx, embedding.vocab_end_idx))

        rows = np.arange(table.part_rows)
        got_values = np.zeros((table.part_rows, DIM), dtype=np.uint8)
        got_scales = np.zeros((table.part_rows, DIM // QUANT_BLOCK), dtype=np.uint8)
        for read in table.read_rows(rows, got_values, got_scales, engram["engram_io_pool"]()):
            read.result()

        # What the in-memory path loads for this rank.
        for full, got, dtype in [
            (full_weight, got_values, torch.float8_e4m3fn),
            (full_scales, got_scales, torch.uint8),
        ]:
            param = torch.nn.Parameter(
                torch.zeros(table.part_rows, full.shape[1], dtype=torch.uint8).view(dtype),
                requires_grad=False,
            )
            param.engram_vocab_start = embedding.vocab_start_idx
            load(param, full)
            assert np.array_equal(param.data.view(torch.uint8).numpy(), got)
    # The shards tile every row a head owns, once.
    assert covered[0][0] == 0 and covered[-1][1] == sum(HEAD_SIZES)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))


def test_table_files_must_match_the_model_shape(engram, tmp_path):
    stem = tmp_path / "layers.1.engram.embed"
    np.zeros((NUM_ROWS, DIM), np.uint8).tofile(f"{stem}.weight.bin")
    np.zeros((NUM_ROWS - 1, DIM // QUANT_BLOCK), np.uint8).tofile(f"{stem}.scale.bin")
    write_meta(tmp_path, 1, NUM_ROWS)
    with pytest.raises(ValueError, match="Re-export"):
        engram["EngramDiskTable"].open(str(tmp_path), 1, NUM_ROWS, DIM, QUANT_BLOCK, 0, NUM_ROWS)
    with pytest.raises(FileNotFoundError):
        engram["EngramDiskTable"].open(str(tmp_path), 2, NUM_ROWS, DIM, QUANT_BLOCK, 0, NUM_ROWS)
    with pytest.raises(ValueError, match="outside"):
        engram["EngramDiskTable"].open(str(tmp_path), 1, NUM_ROWS, DIM, QUANT_BLOCK, 10, NUM_ROWS)


def test_table_meta_must_match_the_checkpoint(engram, tmp_path):
    """Row files of another dtype or shape (a BF16 export, another model's
    tables) are refused when a rank opens them, naming the file."""
    stem = tmp_path / "layers.1.engram.embed"
    np.zeros((NUM_ROWS, DIM), np.uint8).tofile(f"{stem}.weight.bin")
    np.zeros((NUM_ROWS, DIM // QUANT_BLOCK), np.uint8).tofile(f"{stem}.scale.bin")
    table_open = engram["EngramDiskTable"].open
    with pytest.raises(FileNotFoundError, match="re-export"):
        table_open(str(tmp_path), 1, NUM_ROWS, DIM, QUANT_BLOCK, 0, NUM_ROWS)
    write_meta(tmp_path, 1, NUM_ROWS, weight_dtype="BF16")
    with pytest.raises(ValueError, match=r"layers\.1\.engram\.embed\.json: the weight table is BF16"):
        table_open(str(tmp_path), 1, NUM_ROWS, DIM, QUANT_BLOCK, 0, NUM_ROWS)
    write_meta(tmp_path, 1, NUM_ROWS + 5)
    with pytest.raises(ValueError, match="needs"):
        table_open(str(tmp_path), 1, NUM_ROWS, DIM, QUANT_BLOCK, 0, NUM_ROWS)
    write_meta(tmp_path, 1, NUM_ROWS)
    assert table_open(str(tmp_path), 1, NUM_ROWS, DIM, QUANT_BLOCK, 0, NUM_ROWS).part_rows == NUM_ROWS


@pytest.mark.parametrize("num_rows", [0, 1, 100, 16383, 16384, 50_000, 1_000_003])
@pytest.mark.parametrize("workers", [1, 3, 16])
def test_gather_spans_cover_every_row_once(engram, num_rows, workers):
    spans = engram["engram_gather_spans"](num_rows, workers)
    per_task = engram["ENGRAM_ROWS_PER_TASK"]
    covered = [row for begin, end in spans for row in (begin, end)]
    assert covered == sorted(covered)
    assert sum(end - begin for begin, end in spans) == num_rows
    assert (spans[0][0], spans[-1][1]) == (0, num_rows) if num_rows else spans == []
    assert len(spans) <= workers
    if len(spans) > 1:
        assert min(end - begin for begin, end in spans) >= per_task


def test_io_thread_count_is_checked(engram, monkeypatch):
    monkeypatch.setenv("DSV41_ENGRAM_IO_THREADS", "4")
    assert engram["_engram_io_workers"]() == 4
    monkeypatch.delenv("DSV41_ENGRAM_IO_THREADS")
    assert engram["_engram_io_workers"]() == engram["ENGRAM_IO_THREADS_DEFAULT"]
    for bad in ("0", "many"):
        monkeypatch.setenv("DSV41_ENGRAM_IO_THREADS", bad)
        with pytest.raises(ValueError, match="DSV41_ENGRAM_IO_THREADS"):
            engram["_engram_io_workers"]()


class RecordingNumpy:
    """`np` for the loaded code: each `take` is recorded with its thread, and
    the first two meet at a barrier, which only concurrent gathers pass."""

    def __init__(self) -> None:
        self.takes: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(2, timeout=20)
        self.concurrent = False

    def take(self, table, rows, axis, out, mode):
        with self.lock:
            index = len(self.takes)
            self.takes.append((threading.current_thread().name, table.shape[1], len(rows)))
        if index < 2:
            self.barrier.wait()
            self.concurrent = True
        return np.take(table, rows, axis=axis, out=out, mode=mode)

    def __getattr__(self, name):
        return getattr(np, name)


def make_slot(engram, embedding, max_tokens: int = 64):
    out = torch.zeros(max_tokens, embedding.part_n_hash_cols, DIM, dtype=torch.bfloat16)
    return engram["EngramDiskSlot"](
        embedding.disk_table,
        0,
        embedding.head_start,
        embedding.part_n_hash_cols,
        embedding.n_hash_cols,
        embedding.vocab_start_idx,
        embedding.vocab_end_idx,
        QUANT_BLOCK,
        out,
    )


def check_host_rows(slot, embedding, hashes, values, scales) -> int:
    """Every (token, local head) id points at the bytes of the row it needs;
    returns how many rows were read."""
    num_tokens = hashes.shape[0]
    ids = slot.host_ids[: slot.num_rows].numpy().reshape(num_tokens, -1)
    if slot.all_owned:
        # Every id is the rank's: row i is id i, and the device reads the
        # fixed arange instead of uploaded ids.
        ids = np.arange(slot.num_rows, dtype=np.int32).reshape(num_tokens, -1)
    owned = 0
    for t, per_head in enumerate(expected_rows(embedding, hashes)):
        for j, row in enumerate(per_head):
            if row is None:
                assert ids[t, j] == -1
            else:
                owned += 1
                assert np.array_equal(slot.host_values[ids[t, j]].numpy(), values[row])
                assert np.array_equal(slot.host_scales[ids[t, j]].numpy(), scales[row])
    assert slot.num_read == owned
    return owned


@pytest.mark.parametrize(("tp_size", "tp_rank"), [(1, 0), (4, 1), (4, 3)])
def test_a_gather_reads_exactly_the_rows_this_rank_owns(engram, disk_env, tables, tp_size, tp_rank):
    _, contents = tables
    values, scales = contents[LAYER_IDS[0]]
    embedding = make_embedding(engram, LAYER_IDS[0], tp_size=tp_size, tp_rank=tp_rank)
    slot = make_slot(engram, embedding)
    hashes = random_hashes(np.random.default_rng(1), 48)
    for read in slot.gather(hashes, engram["engram_io_pool"]()):
        read.result()
    assert check_host_rows(slot, embedding, hashes, values, scales) > 0


@pytest.mark.parametrize("stray", ["below", "int32-min", "at-end", "none"])
def test_select_counts_a_step_as_all_owned_only_when_every_id_is(engram, disk_env, tables, stray):
    """select's one-bound check (an id below the rank's range wraps to a huge
    unsigned value) and its reused row buffer: ids just outside the rank's
    range, or INT32_MIN, are never read as its rows."""
    _, contents = tables
    values, scales = contents[LAYER_IDS[0]]
    embedding = make_embedding(engram, LAYER_IDS[0], tp_size=4, tp_rank=1)
    slot = make_slot(engram, embedding)
    rng = np.random.default_rng(46)
    buckets = rng.integers(0, min(HEAD_SIZES), (6, len(HEAD_SIZES)))
    hashes = (buckets + HEAD_OFFSETS).astype(np.int32)
    head = embedding.head_start
    outside = {
        "below": embedding.vocab_start_idx - 1,
        "int32-min": np.iinfo(np.int32).min,
        "at-end": embedding.vocab_end_idx,
    }
    if stray in outside:
        hashes[2, head] = outside[stray]
    first = slot.select(hashes)
    assert slot.all_owned == (stray == "none")
    assert slot.rows_checked
    assert first.min() >= 0 and first.max() < embedding.disk_table.part_rows
    for read in slot.table.read_rows(first, slot._values_np, slot._scales_np, None, slot.rows_checked):
        read.result()
    assert check_host_rows(slot, embedding, hashes, values, scales) == 12 - (stray != "none")
    if slot.all_owned:
        again = slot.select(hashes)
        assert again.ctypes.data == first.ctypes.data, "rows land in the slot's own buffer every step"


def test_large_gathers_are_split_over_the_shared_pool(engram, disk_env, tables, monkeypatch):
    _, contents = tables
    values, scales = contents[LAYER_IDS[0]]
    embedding = make_embedding(engram, LAYER_IDS[0], tp_size=1, tp_rank=0)
    slot = make_slot(engram, embedding)
    hashes = random_hashes(np.random.default_rng(2), 64)
    recorder = RecordingNumpy()
    monkeypatch.setitem(engram, "np", recorder)
    monkeypatch.setitem(engram, "ENGRAM_ROWS_PER_TASK", 100)
    pool = engram["engram_io_pool"]()
    reads = slot.gather(hashes, pool)
    assert len(reads) > 1
    for read in reads:
        read.result()
    # Each task gathers its span from both files, on the pool's threads, two at once.
    assert sorted(width for _, width, _ in recorder.takes) == sorted([DIM, DIM // QUANT_BLOCK] * len(reads))
    assert sum(n for _, width, n in recorder.takes if width == DIM) == slot.num_read
    assert all(name.startswith("dsv41-engram-io") for name, *_ in recorder.takes)
    assert recorder.concurrent
    check_host_rows(slot, embedding, hashes, values, scales)

    # A small gather (a decode step) stays on the calling thread.
    monkeypatch.setitem(engram, "ENGRAM_ROWS_PER_TASK", 16384)
    recorder.takes.clear()
    recorder.barrier = threading.Barrier(1)
    assert slot.gather(hashes[:4], pool) == []
    assert {name for name, *_ in recorder.takes} == {threading.current_thread().name}


def test_a_table_that_shrinks_while_open_is_refused_before_reading(engram, tmp_path):
    """A mapped page past a truncated file's end would kill the process
    (SIGBUS); every gather checks the sizes first and names the file."""
    stem = tmp_path / "layers.1.engram.embed"
    np.ones((NUM_ROWS, DIM), np.uint8).tofile(f"{stem}.weight.bin")
    np.ones((NUM_ROWS, DIM // QUANT_BLOCK), np.uint8).tofile(f"{stem}.scale.bin")
    write_meta(tmp_path, 1, NUM_ROWS)
    table = engram["EngramDiskTable"].open(str(tmp_path), 1, NUM_ROWS, DIM, QUANT_BLOCK, 0, NUM_ROWS)
    values = np.zeros((4, DIM), np.uint8)
    scales = np.zeros((4, DIM // QUANT_BLOCK), np.uint8)
    assert table.read_rows(np.array([0, 5, 9, NUM_ROWS - 1]), values, scales, None) == []
    assert values.all() and scales.all()
    os.truncate(f"{stem}.weight.bin", 4096)
    with pytest.raises(OSError, match=r"weight\.bin shrank to 4096 of"):
        table.read_rows(np.array([0]), values, scales, None)


def build_model(engram, tp_size: int, tp_rank: int, max_tokens: int):
    """A module tree like DeepseekV4Model's: the n-gram hash op and two
    decoder layers with disk-backed Engram modules."""
    nn = torch.nn
    hash_state = engram["NgramHashState"].__new__(engram["NgramHashState"])
    nn.Module.__init__(hash_state)
    # 0.34.0's NgramHashState is stateless (no V1 slot cache): the KV cache
    # module only tells whether the forward runs Engram (ensure_cache).
    hash_state.swa_cache_module = SimpleNamespace(kv_cache=torch.ones(1))
    hash_state.register_buffer("multipliers", torch.ones(len(LAYER_IDS), 2, dtype=torch.int64))
    hash_state.register_buffer("primes", torch.tensor([[HEAD_SIZES]] * len(LAYER_IDS)))
    layers = nn.ModuleList()
    for index, layer_id in reversed(list(enumerate(LAYER_IDS))):
        module = engram["Engram"].__new__(engram["Engram"])
        nn.Module.__init__(module)
        module.layer_hash_index = index
        module.embed_tokens = make_embedding(engram, layer_id, tp_size, tp_rank)
        module._init_staging(max_tokens, DIM)
        holder = nn.Module()
        holder.engram = module
        layers.append(holder)
    model = nn.Module()
    model.engram_hash = hash_state
    model.layers = layers
    return model


class AllocationWatch(TorchDispatchMode):
    """Records every aten op; views and in-place writes allocate nothing."""

    ALLOWED: ClassVar[set[str]] = {
        "aten::copy_",
        "aten::fill_",
        "aten::slice",
        "aten::select",
        "aten::view",
        "aten::alias",
        "aten::detach",
    }

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def test_stager_fills_preallocated_buffers_without_allocating(engram, disk_env, tables):
    _, contents = tables
    model = build_model(engram, tp_size=2, tp_rank=1, max_tokens=64)
    stager = engram["EngramDiskStager"].create(model)
    assert stager is not None
    assert [slot.layer_hash_index for slot in stager.slots] == [0, 1]
    assert stager.pool is engram["engram_io_pool"]()
    buffers = [
        t
        for slot in stager.slots
        for t in (
            slot.host_values,
            slot.host_scales,
            slot.host_ids,
            slot.values,
            slot.scales,
            slot.ids,
            slot.out,
        )
    ]
    pointers = [t.data_ptr() for t in buffers]
    rng = np.random.default_rng(7)
    for num_tokens in (5, 64, 17):
        hashes = np.stack(
            [random_hashes(rng, num_tokens) for _ in LAYER_IDS], axis=1
        )  # [tokens, layers, heads], as NgramHashState returns them
        watch = AllocationWatch()
        with watch:
            stager.stage_hashes(hashes)
        assert watch.ops and set(watch.ops) <= AllocationWatch.ALLOWED, watch.ops
        assert [t.data_ptr() for t in buffers] == pointers

        for slot, layer_id in zip(stager.slots, LAYER_IDS, strict=True):
            values, scales = contents[layer_id]
            holder = next(h for h in model.layers if h.engram.layer_hash_index == slot.layer_hash_index)
            embedding = holder.engram.embed_tokens
            assert slot.out is holder.engram.staged_rows
            needed = expected_rows(embedding, hashes[:, slot.layer_hash_index])
            ids = slot.ids[: num_tokens * slot.local_heads].view(num_tokens, -1)
            for t, per_head in enumerate(needed):
                for j, row in enumerate(per_head):
                    compact = int(ids[t, j])
                    if row is None:
                        assert compact == -1
                        continue
                    assert 0 <= compact < slot.num_read
                    assert np.array_equal(slot.values[compact].numpy(), values[row])
                    assert np.array_equal(slot.scales[compact].numpy(), scales[row])


def test_stager_is_off_without_the_flag(engram, tables, monkeypatch):
    directory, _ = tables
    monkeypatch.setenv("DSV41_ENGRAM_DIR", str(directory))
    monkeypatch.setenv("DSV41_ENGRAM_DISK", "1")
    model = build_model(engram, tp_size=1, tp_rank=0, max_tokens=8)
    monkeypatch.delenv("DSV41_ENGRAM_DISK")
    assert engram["EngramDiskStager"].create(model) is None
    monkeypatch.setenv("DSV41_ENGRAM_DISK", "1")
    assert engram["EngramDiskStager"].create(torch.nn.Linear(2, 2)) is None


def test_forward_has_nothing_to_look_up_on_disk(engram, disk_env):
    model = build_model(engram, tp_size=1, tp_rank=0, max_tokens=8)
    layer = model.layers[0].engram
    before = layer.staged_rows.clone()
    # Without a stager the rows would stay zero: refused, not computed.
    with pytest.raises(RuntimeError, match="no EngramDiskStager stages its rows"):
        layer.prepare_embeddings(torch.zeros(8, len(HEAD_SIZES), dtype=torch.int32))
    stager = engram["EngramDiskStager"].create(model)
    assert stager is layer.disk_stager is not None
    # With one, the forward only checks the staged ids (a GPU kernel, run in
    # tests/gpu), and looks nothing up.
    checks = []
    stager.check = lambda slot, ids, rows: checks.append((slot, ids.shape, rows.shape))
    layer.prepare_embeddings(torch.zeros(8, len(HEAD_SIZES), dtype=torch.int32))
    assert checks == [(layer.disk_slot, (8, len(HEAD_SIZES)), layer.staged_rows[:8].shape)]
    assert torch.equal(layer.staged_rows, before)
    with pytest.raises(RuntimeError, match="EngramDiskStager"):
        layer.embed_tokens.lookup(torch.zeros(1, 7, dtype=torch.int32), before)

    # Host tables keep the release path: prepare_embeddings looks rows up.
    looked_up = []
    host = SimpleNamespace(disk_table=None, lookup=lambda ids, rows: looked_up.append(ids.shape))
    fake = SimpleNamespace(staged_rows=before, embed_tokens=host, _prefetch_stream=None)
    engram["Engram"].prepare_embeddings(fake, torch.zeros(8, 7, dtype=torch.int32))
    assert looked_up == [(8, 7)]


def test_disk_tables_load_on_the_only_gpu_model_runner(engram, disk_env, monkeypatch):
    """0.34.0 removed the V1 GPU model runner and `VllmConfig.use_v2_model_runner`:
    every GPU engine runs V2, whose DeepseekV41ModelState stages the rows. A
    config without that field loads the disk tables (the 0.33.0 patch's check,
    `getattr(config, "use_v2_model_runner", False)`, would refuse every load);
    a forward without a stager is still refused (see the test above)."""
    config = SimpleNamespace(
        engram_config=SimpleNamespace(cpu_offload=True, dp_shared_memory=True, use_thp=True),
    )
    monkeypatch.setitem(engram, "get_current_vllm_config", lambda: config)
    layout = SimpleNamespace(
        num_embeddings=(NUM_ROWS,), head_dim=DIM, primes=((HEAD_SIZES,),), layer_ids=(LAYER_IDS[0],)
    )
    Distributed.tp_size, Distributed.tp_rank = 1, 0
    embedding = engram["Engram"]._create_embedding(None, layout, 0)
    assert embedding.disk_table is not None
    assert not (embedding.cpu_offload or embedding.dp_shared_memory or embedding.use_thp)
    assert not hasattr(embedding, "weight")  # nothing for the loader to fill
    monkeypatch.delenv("DSV41_ENGRAM_DISK")
    monkeypatch.setitem(
        engram,
        "get_current_vllm_config",
        lambda: SimpleNamespace(
            engram_config=SimpleNamespace(cpu_offload=False, dp_shared_memory=False, use_thp=False)
        ),
    )
    kwargs = {}
    monkeypatch.setitem(engram, "ParallelEngramEmbedding", lambda *args, **kw: kwargs.update(kw))
    engram["Engram"]._create_embedding(None, layout, 0)
    assert kwargs["disk_layer_id"] is None  # flag unset: the release's table


class LookupKernel:
    """``_engram_lookup_kernel[grid](...)``: records the launches (the Triton
    kernel runs in tests/gpu)."""

    def __init__(self) -> None:
        self.launches: list[int] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs) -> None:
            self.launches.append(args[7])  # num_rows

        return launch


def test_stage_hashes_as_the_forward_does_and_refuses_stale_or_skipped_steps(engram, disk_env, tables, monkeypatch):
    """stage() calls the model's NgramHashState with 0.34.0's forward signature
    (six inputs: no slot mapping or block table, which 0.34.0 removed), stages
    the rows, arms the forward's check for the real tokens, and raises rather
    than return without staging."""
    model = build_model(engram, tp_size=1, tp_rank=0, max_tokens=16)
    stager = engram["EngramDiskStager"].create(model)
    hash_state = stager.hash_state
    signature = inspect.signature(engram["NgramHashState"].forward)
    assert list(signature.parameters)[1:] == [
        "input_ids",
        "positions",
        "query_start_loc",
        "dead_mask",
        "lookback_token_ids",
        "lookback_dead_mask",
    ]
    rng = np.random.default_rng(11)
    num_tokens = 6
    hashes = torch.from_numpy(np.stack([random_hashes(rng, num_tokens) for _ in LAYER_IDS], axis=1))
    calls = []

    def forward(*args):
        signature.bind(hash_state, *args)  # a TypeError if the call does not fit
        calls.append(args)
        return hashes

    monkeypatch.setattr(hash_state, "forward", forward)
    sentinel = 128815
    mm = SimpleNamespace(image_sentinel_mask=lambda ids: ids == sentinel)
    monkeypatch.setitem(sys.modules, "vllm.models.deepseek_v41.common.mm_preprocess", mm)
    kernel = LookupKernel()
    monkeypatch.setitem(engram, "_engram_lookup_kernel", kernel)

    input_ids = torch.tensor([5, 6, sentinel, 8, 9, 10], dtype=torch.int32)
    positions = torch.arange(num_tokens)
    qsl = torch.tensor([0, 2, num_tokens], dtype=torch.int32)
    lookback = torch.tensor([[1, 2], [3, sentinel]], dtype=torch.int32)
    assert stager.forward_uses_engram()
    stager.stage(input_ids, positions, qsl, lookback, 4)
    [args] = calls
    assert args[0] is input_ids and args[1] is positions and args[2] is qsl and args[4] is lookback
    assert args[3].tolist() == [False, False, True, False, False, False]
    assert args[5].tolist() == [[False, False], [False, True]]
    assert torch.equal(stager.staged_hashes[:num_tokens], hashes)
    assert int(stager.expect) == 4  # the real tokens; graph padding after them is not checked
    assert kernel.launches == [num_tokens * slot.local_heads for slot in stager.slots]
    stager.disarm()
    assert int(stager.expect) == 0

    with pytest.raises(ValueError, match="input ids"):
        stager.stage(None, positions, qsl, lookback)
    hash_state.swa_cache_module = SimpleNamespace(kv_cache=torch.empty(0))  # the profile run
    assert not stager.forward_uses_engram()
    with pytest.raises(RuntimeError, match="KV cache unbound"):
        stager.stage(input_ids, positions, qsl, lookback)
    hash_state.swa_cache_module = SimpleNamespace(kv_cache=torch.ones(1))
    stager.stale[1] = 1  # what the check kernel sets when a forward read other rows
    with pytest.raises(RuntimeError, match=r"Engram layers \[1\].*poisoned with NaN"):
        stager.stage(input_ids, positions, qsl, lookback)
    # Refused once: the flags are cleared, so the next staged step runs.
    stager.stage(input_ids, positions, qsl, lookback)
    # A verdict taken after the step (before its output is used) refuses
    # it there instead, and also clears.
    stager.stale[0] = 1
    assert stager.poisoned_layers() == [stager.slots[0].layer_hash_index]
    assert stager.poisoned_layers() == []
    stager.stale[1] = 1
    with pytest.raises(engram["EngramStaleRowsError"], match=r"the next step that does runs"):
        stager.refuse_poisoned()
    stager.refuse_poisoned()
    stager.stage(input_ids, positions, qsl, lookback)
    assert int(stager.expect) == num_tokens


def test_stage_writes_the_check_count_only_when_it_changes(engram, disk_env, tables, monkeypatch):
    """A decode loop of one batch size launches no fill of `expect` a step;
    after a disarm (0) the same count is written again."""
    model = build_model(engram, tp_size=1, tp_rank=0, max_tokens=16)
    stager = engram["EngramDiskStager"].create(model)
    rng = np.random.default_rng(12)
    hashes = torch.from_numpy(np.stack([random_hashes(rng, 6) for _ in LAYER_IDS], axis=1))
    monkeypatch.setattr(stager.hash_state, "forward", lambda *args: hashes)
    mm = SimpleNamespace(image_sentinel_mask=lambda ids: ids < 0)
    monkeypatch.setitem(sys.modules, "vllm.models.deepseek_v41.common.mm_preprocess", mm)
    monkeypatch.setitem(engram, "_engram_lookup_kernel", LookupKernel())
    fills: list[int] = []
    real = stager.expect

    class Expect:
        def fill_(self, value: int) -> None:
            fills.append(value)
            real.fill_(value)

    stager.expect = Expect()
    ids, positions = torch.arange(6, dtype=torch.int32), torch.arange(6)
    qsl, lookback = torch.tensor([0, 6], dtype=torch.int32), torch.zeros((1, 2), dtype=torch.int32)
    for real_tokens in (4, 4, 4, 5, 5):
        stager.stage(ids, positions, qsl, lookback, real_tokens)
        assert int(real) == real_tokens
    assert fills == [4, 5]
    stager.disarm()
    assert int(real) == 0
    stager.stage(ids, positions, qsl, lookback, 5)
    assert int(real) == 5
    assert fills == [4, 5, 0, 5]


def test_disk_staging_starts_zeroed(engram, monkeypatch):
    """Dummy and capture runs read the rows before any step staged them: on
    disk they start as zeros, while host tables keep the release's
    uninitialized buffer."""
    poisoned = _cpu_torch(empty=lambda *shape, **kw: torch.full(shape, float("nan"), **kw))
    monkeypatch.setitem(engram, "torch", poisoned)
    for disk_table, expect_nan in [(object(), False), (None, True)]:
        fake = SimpleNamespace(
            embed_tokens=SimpleNamespace(
                disk_table=disk_table,
                dp_size=1,
                part_n_hash_cols=2,
                cpu_offload=False,
            ),
            _prefetch_stream="stream",
        )
        engram["Engram"]._init_staging(fake, 4, DIM)
        assert fake.staged_rows.shape == (4, 2, DIM)
        assert bool(fake.staged_rows.isnan().all()) is expect_nan
        assert fake._prefetch_stream is None


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, array) in tensors.items():
        data = array.tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + b"".join(blobs))


def test_export_writes_the_row_files_a_rank_reads(engram, tmp_path):
    rng = np.random.default_rng(3)
    weight = rng.integers(0, 256, (NUM_ROWS, DIM), dtype=np.uint8)
    scale = rng.integers(0, 256, (NUM_ROWS, DIM // QUANT_BLOCK), dtype=np.uint8)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    _write_safetensors(
        checkpoint / "model-00001-of-00002.safetensors",
        {
            "layers.1.attn.wq_a.weight": ("U8", rng.integers(0, 9, (4, 4), np.uint8)),
            "layers.1.engram.embed.weight": ("F8_E4M3", weight),
        },
    )
    _write_safetensors(
        checkpoint / "model-00002-of-00002.safetensors",
        {
            "layers.1.engram.wkv.weight": ("U8", rng.integers(0, 9, (2, 2), np.uint8)),
            "layers.1.engram.embed.scale": ("F8_E8M0", scale),
        },
    )
    out = tmp_path / "nvme"
    written = engram["export_engram_tables"](str(checkpoint), str(out))
    meta_path = engram["engram_table_meta_path"](str(out), 1)
    assert sorted(written) == sorted([*engram["engram_table_paths"](str(out), 1), meta_path])
    assert sorted(p.name for p in out.iterdir()) == [
        "layers.1.engram.embed.json",
        "layers.1.engram.embed.scale.bin",
        "layers.1.engram.embed.weight.bin",
    ]
    assert json.loads(Path(meta_path).read_text()) == {
        "scale": {"dtype": "F8_E8M0", "shape": [NUM_ROWS, DIM // QUANT_BLOCK]},
        "weight": {"dtype": "F8_E4M3", "shape": [NUM_ROWS, DIM]},
    }
    table = engram["EngramDiskTable"].open(str(out), 1, NUM_ROWS, DIM, QUANT_BLOCK, 200, 300)
    rows = np.array([0, 1, 2, 150, 299])
    got_values = np.zeros((len(rows), DIM), np.uint8)
    got_scales = np.zeros((len(rows), DIM // QUANT_BLOCK), np.uint8)
    assert table.read_rows(rows, got_values, got_scales, engram["engram_io_pool"]()) == []
    assert np.array_equal(got_values, weight[200 + rows])
    assert np.array_equal(got_scales, scale[200 + rows])
    with pytest.raises(IndexError):
        table.read_rows(np.array([300]), got_values, got_scales, None)

    _write_safetensors(
        checkpoint / "model-00001-of-00002.safetensors",
        {"layers.1.engram.embed.weight": ("BF16", weight.view(np.uint16))},
    )
    with pytest.raises(ValueError, match="one-byte"):
        engram["export_engram_tables"](str(checkpoint), str(out))


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((10, 0), (36864, 4096)),  # the release's GB200 values, unchanged
        ((10, 3), (36864, 4096)),
        ((12, 1), (12288, 1024)),  # GB10
        ((12, 0), (None, None)),
        ((9, 0), (None, None)),
        (None, (None, None)),
    ],
)
def test_lookup_thresholds(patched_source, make_platform, capability, expected):
    loaded = patched_source.load(
        ENGRAM,
        ["_engram_lookup_thresholds"],
        {"current_platform": make_platform(capability), "torch": torch},
    )
    thresholds = loaded["_engram_lookup_thresholds"]
    assert thresholds(torch.device("cuda", 0)) == expected


class HintRecorder:
    """``os`` as EngramDiskTable sees it, recording its read hints and
    answering its non-blocking probes as told (cached or not)."""

    def __init__(self, cached: bool) -> None:
        self.cached = cached
        self.hints: list[tuple[int, int]] = []

    def __getattr__(self, name: str):
        return getattr(os, name)

    def posix_fadvise(self, fd, offset, length, advice) -> None:
        assert advice == os.POSIX_FADV_WILLNEED
        self.hints.append((offset, length))

    def preadv(self, fd, buffers, offset, flags) -> int:
        assert flags == os.RWF_NOWAIT
        if not self.cached:
            raise BlockingIOError(11, "not cached")
        return 1


def test_a_cold_step_asks_for_its_pages_at_once_merging_nearby_ones(engram, tmp_path, monkeypatch):
    """Distinct pages in file order, pages at most ENGRAM_MERGE_GAP_PAGES
    apart in one request, no request longer than ENGRAM_HINT_PAGES; a step
    whose probed rows are cached asks for nothing."""
    page = engram["_ENGRAM_PAGE"]
    rows_per_page = page // DIM
    num_rows = 200 * rows_per_page
    stem = tmp_path / "layers.1.engram.embed"
    np.zeros((num_rows, DIM), np.uint8).tofile(f"{stem}.weight.bin")
    np.zeros((num_rows, DIM // QUANT_BLOCK), np.uint8).tofile(f"{stem}.scale.bin")
    write_meta(tmp_path, 1, num_rows)
    # The shard starts one page into the file: pages are counted in the file.
    table = engram["EngramDiskTable"].open(
        str(tmp_path), 1, num_rows, DIM, QUANT_BLOCK, rows_per_page, num_rows - rows_per_page
    )
    monkeypatch.setitem(engram, "ENGRAM_MERGE_GAP_PAGES", 4)
    monkeypatch.setitem(engram, "ENGRAM_HINT_PAGES", 32)
    shard_pages = [0, 1, 1, 6, 20, 25, 26, *range(100, 161)]  # repeats and a gap of exactly 4
    rows = np.array([p * rows_per_page + 1 for p in shard_pages][::-1], dtype=np.int64)

    cold = HintRecorder(cached=False)
    monkeypatch.setitem(engram, "os", cold)
    table.prefetch(rows)
    file_page = [(o // page, n // page) for o, n in cold.hints]
    # shard page p is file page p + 1; 1-7 (gap 4 between 2 and 7), then
    # 21 and 26-27 (gap 4), then 101-161 split at 32 pages
    assert file_page == [(1, 7), (21, 7), (101, 32), (133, 29)]
    assert table.hint_calls == 4

    warm = HintRecorder(cached=True)
    monkeypatch.setitem(engram, "os", warm)
    table.prefetch(rows)
    assert warm.hints == [] and table.hint_calls == 0

    # Large steps find their pages through a page map instead of a sort,
    # and ask only for those mincore finds missing: all of them once evicted.
    monkeypatch.setitem(engram, "ENGRAM_ROWS_PER_TASK", 4)
    drop_page_cache(table.paths[0])
    cold.hints.clear()
    monkeypatch.setitem(engram, "os", cold)
    table.prefetch(rows)
    assert [(o // page, n // page) for o, n in cold.hints] == file_page
    assert table.missing_pages == 67  # distinct pages: 0, 1, 6, 20, 25, 26, 100-160


def drop_page_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_pages(path: str, pages: list[int]) -> list[bool]:
    """mincore of file pages, through a mapping of our own."""
    page = mmap.PAGESIZE
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapping:
        vec = np.zeros((len(mapping) + page - 1) // page, np.uint8)
        address = np.frombuffer(mapping, np.uint8).ctypes.data
        libc = ctypes.CDLL(None, use_errno=True)
        out = vec.ctypes.data_as(ctypes.c_void_p)
        assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(len(mapping)), out) == 0
        found = [bool(vec[p] & 1) for p in pages]
        del address
    return found


def read_pages(path: str, pages: list[int]) -> None:
    """Bring exactly `pages` into the page cache (no read-ahead)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for p in pages:
            os.pread(fd, mmap.PAGESIZE, p * mmap.PAGESIZE)
    finally:
        os.close(fd)


def one_page_table(engram, tmp_path, num_pages: int):
    page = engram["_ENGRAM_PAGE"]
    rows_per_page = page // DIM
    num_rows = num_pages * rows_per_page
    stem = tmp_path / "layers.1.engram.embed"
    np.arange(num_rows * DIM, dtype=np.uint32).astype(np.uint8).reshape(num_rows, DIM).tofile(f"{stem}.weight.bin")
    np.zeros((num_rows, DIM // QUANT_BLOCK), np.uint8).tofile(f"{stem}.scale.bin")
    write_meta(tmp_path, 1, num_rows)
    table = engram["EngramDiskTable"].open(str(tmp_path), 1, num_rows, DIM, QUANT_BLOCK, 0, num_rows)
    return table, rows_per_page


class RegionRecorder(HintRecorder):
    """Probes hit below `cached_below` (a byte offset) only."""

    def __init__(self, cached_below: int) -> None:
        super().__init__(cached=False)
        self.cached_below = cached_below
        self.probed: list[int] = []

    def preadv(self, fd, buffers, offset, flags) -> int:
        self.probed.append(offset)
        if offset >= self.cached_below:
            raise BlockingIOError(11, "not cached")
        return 1


@pytest.mark.parametrize("tokens", [64, 8192])
def test_the_probe_reads_many_heads_not_one(engram, tmp_path, monkeypatch, tokens):
    """Rows run (token, head) and each head's ids lie in a region of their
    own. With only head 0's region cached, the probe must still find the
    step's missing pages: probing at a stride that is a multiple of the
    heads read head 0's rows only and took the step for warm."""
    heads = 24
    table, _ = one_page_table(engram, tmp_path, 24 * 8)
    region = table.part_rows // heads
    rng = np.random.default_rng(tokens)
    rows = (np.arange(heads) * region + rng.integers(0, region, (tokens, heads))).reshape(-1)
    recorder = RegionRecorder(cached_below=region * DIM)
    monkeypatch.setitem(engram, "os", recorder)
    assert table._missing(rows), "head 0's region cached, the rest not: pages are missing"
    probed_heads = {offset // (region * DIM) for offset in recorder.probed}
    assert len(probed_heads) > 1, probed_heads
    # All of it cached: every probe hits and the step is warm.
    recorder.cached_below = table.part_rows * DIM
    recorder.probed.clear()
    assert not table._missing(rows)
    expected = (
        engram["ENGRAM_PROBE_ROWS_LARGE"]
        if rows.size >= engram["ENGRAM_ROWS_PER_TASK"]
        else engram["ENGRAM_PROBE_ROWS"]
    )
    assert len(recorder.probed) == expected


def test_the_probe_keeps_its_picks_for_a_bounded_number_of_step_sizes(engram, tmp_path, monkeypatch):
    """The probed rows are kept per step size; a server's step sizes vary
    without end, so the table keeps at most 256 sizes, and a size probed
    after the cache was emptied probes the same rows as before."""
    table, _ = one_page_table(engram, tmp_path, 64)
    recorder = RegionRecorder(cached_below=table.part_rows * DIM)  # all cached: every row is probed
    monkeypatch.setitem(engram, "os", recorder)
    rows = np.arange(table.part_rows, dtype=np.int64)
    sizes = range(17, 17 + 600)
    probed = {}
    for size in sizes:
        recorder.probed.clear()
        assert not table._missing(rows[:size])
        probed[size] = list(recorder.probed)
        assert len(table._picks) <= 256
    assert len(table._picks) > 0
    for size in sizes:
        recorder.probed.clear()
        table._missing(rows[:size])
        assert recorder.probed == probed[size], size


def test_a_partly_cached_large_step_asks_only_for_its_missing_pages(engram, tmp_path, monkeypatch):
    """Issue 46 item 6: with some of a large step's pages in the page cache
    (mincore-checked), the step is not skipped after a few probes, and asks
    for exactly the pages mincore finds missing."""
    page = engram["_ENGRAM_PAGE"]
    table, rows_per_page = one_page_table(engram, tmp_path, 400)
    monkeypatch.setitem(engram, "ENGRAM_ROWS_PER_TASK", 8)
    monkeypatch.setitem(engram, "ENGRAM_MERGE_GAP_PAGES", 0)
    step_pages = list(range(0, 400, 2))  # every other page
    rows = np.array([p * rows_per_page + 3 for p in step_pages], dtype=np.int64)
    drop_page_cache(table.paths[0])
    warmed = step_pages[::3]  # a third of them read, so cached
    read_pages(table.paths[0], warmed)
    cached = cached_pages(table.paths[0], step_pages)
    assert cached == [p in warmed for p in step_pages]  # the cache holds exactly those
    missing = [p for p in step_pages if p not in warmed]
    recorder = HintRecorder(cached=False)  # the probes miss: pages are missing
    monkeypatch.setitem(engram, "os", recorder)
    table.prefetch(rows)
    assert sorted(o // page for o, _ in recorder.hints) == missing
    assert all(n == page for _, n in recorder.hints)
    assert table.missing_pages == len(missing) == table.hint_calls
    # All of them cached: nothing asked for, whatever the probes say.
    read_pages(table.paths[0], missing)
    recorder.hints.clear()
    table.prefetch(rows)
    assert recorder.hints == [] and table.missing_pages == 0


class ThreadRecorder(HintRecorder):
    def __init__(self) -> None:
        super().__init__(cached=False)
        self.threads: set[str] = set()
        self.reads: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def posix_fadvise(self, fd, offset, length, advice) -> None:
        with self.lock:
            self.threads.add(threading.current_thread().name)
        super().posix_fadvise(fd, offset, length, advice)

    def preadv(self, fd, buffers, offset, flags=0) -> int:
        if flags:
            return super().preadv(fd, buffers, offset, flags)
        with self.lock:
            self.threads.add(threading.current_thread().name)
            self.reads.append((offset, sum(len(b) for b in buffers)))
        return os.preadv(fd, buffers, offset)


@pytest.mark.parametrize("mode", ["pool-hint", "read"])
def test_a_large_steps_requests_go_out_in_parallel_from_the_pool(engram, tmp_path, monkeypatch, mode):
    """Issue 46 item 1: with ENGRAM_PREFETCH_MODE "pool-hint" or "read", a
    step with many page runs splits them over the shared pool (hints, or
    preadv reads of the merged runs), each run asked for once, in file order
    within each task; small steps hint on the calling thread, and so does a
    large one in the default mode, "hint"."""
    page = engram["_ENGRAM_PAGE"]
    table, rows_per_page = one_page_table(engram, tmp_path, 400)
    monkeypatch.setitem(engram, "ENGRAM_ROWS_PER_TASK", 8)
    monkeypatch.setitem(engram, "ENGRAM_HINTS_PER_TASK", 10)
    monkeypatch.setitem(engram, "ENGRAM_MERGE_GAP_PAGES", 0)
    monkeypatch.setitem(engram, "ENGRAM_PREFETCH_MODE", mode)
    step_pages = list(range(0, 400, 3))  # 134 runs of one page
    rows = np.array([p * rows_per_page for p in step_pages], dtype=np.int64)
    drop_page_cache(table.paths[0])
    recorder = ThreadRecorder()
    monkeypatch.setitem(engram, "os", recorder)
    with ThreadPoolExecutor(4, thread_name_prefix="io") as pool:
        pending = table.prefetch(rows, pool)
        assert len(pending) == 4
        assert sum(f.result() for f in pending) == len(step_pages) == table.hint_calls
    asked = recorder.hints if mode == "pool-hint" else recorder.reads
    assert sorted(asked) == [(p * page, page) for p in step_pages]
    assert recorder.threads and all(name.startswith("io") for name in recorder.threads)
    if mode == "read":
        assert recorder.hints == [] and all(cached_pages(table.paths[0], step_pages))
    # A small step (under ENGRAM_HINTS_PER_TASK runs) hints here.
    recorder.hints.clear()
    recorder.threads.clear()
    monkeypatch.setitem(engram, "ENGRAM_ROWS_PER_TASK", 16384)
    with ThreadPoolExecutor(4, thread_name_prefix="io") as pool:
        assert table.prefetch(rows[:5], pool) == []
    assert len(recorder.hints) == 5 and recorder.threads == {threading.current_thread().name}
    # The default mode: every run of the large step hinted here, in file order.
    recorder.hints.clear()
    recorder.threads.clear()
    monkeypatch.setitem(engram, "ENGRAM_ROWS_PER_TASK", 8)
    monkeypatch.setitem(engram, "ENGRAM_PREFETCH_MODE", "hint")
    drop_page_cache(table.paths[0])
    with ThreadPoolExecutor(4, thread_name_prefix="io") as pool:
        assert table.prefetch(rows, pool) == []
    assert recorder.hints == [(p * page, page) for p in step_pages]
    assert recorder.threads == {threading.current_thread().name}


def parallel(use_ubatching=False, enable_dbo=False, ubatch_size=0, data_parallel_size=1):
    """vLLM 0.34.0's ParallelConfig fields for micro-batching and DP."""
    return SimpleNamespace(
        use_ubatching=use_ubatching,
        enable_dbo=enable_dbo,
        ubatch_size=ubatch_size,
        data_parallel_size=data_parallel_size,
    )


@pytest.mark.parametrize(
    ("config_of", "named"),
    [
        (parallel(use_ubatching=True, enable_dbo=True, data_parallel_size=2), "dual-batch overlap"),
        (parallel(use_ubatching=True, ubatch_size=4), "ubatch_size=4"),
        (parallel(data_parallel_size=2), "data_parallel_size=2"),
    ],
)
def test_unsupported_parallel_modes_are_refused_at_load_by_name(engram, disk_env, monkeypatch, config_of, named):
    """Issue 46 item 5: micro-batching (DBO, ubatch_size) and DP > 1 with
    DSV41_ENGRAM_DISK=1 stop the load naming the mode; without the flag the
    same config loads the release's table."""
    config = SimpleNamespace(
        engram_config=SimpleNamespace(cpu_offload=False, dp_shared_memory=False, use_thp=False),
        parallel_config=config_of,
    )
    monkeypatch.setitem(engram, "get_current_vllm_config", lambda: config)
    layout = SimpleNamespace(
        num_embeddings=(NUM_ROWS,), head_dim=DIM, primes=((HEAD_SIZES,),), layer_ids=(LAYER_IDS[0],)
    )
    Distributed.tp_size, Distributed.tp_rank = 1, 0
    with pytest.raises(ValueError, match=f"DSV41_ENGRAM_DISK=1 does not support.*{re.escape(named)}"):
        engram["Engram"]._create_embedding(None, layout, 0)
    monkeypatch.delenv("DSV41_ENGRAM_DISK")
    kwargs = {}
    monkeypatch.setitem(engram, "ParallelEngramEmbedding", lambda *args, **kw: kwargs.update(kw))
    engram["Engram"]._create_embedding(None, layout, 0)
    assert kwargs["disk_layer_id"] is None
    # One TP rank, no micro-batches: disk mode loads.
    monkeypatch.setenv("DSV41_ENGRAM_DISK", "1")
    config.parallel_config = parallel()
    kwargs.clear()
    engram["Engram"]._create_embedding(None, layout, 0)
    assert kwargs["disk_layer_id"] == LAYER_IDS[0]
