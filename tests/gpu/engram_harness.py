"""Load the patched and the released ``common/engram.py`` as whole modules on a
CUDA machine that has torch and triton but no vLLM.

Only the ``vllm.*`` imports are stand-ins (``install_vllm_stubs``): a single
rank's distributed helpers, a plain bf16 ``ColumnParallelLinear``, the CUDA
platform queries answered by torch, and the UVA view of a pinned tensor. The
Triton kernels, ``NgramHashState``, ``ParallelEngramEmbedding``, ``Engram``,
``EngramDiskStager`` and ``export_engram_tables`` are the release's and the
patch's own code.

Shared by ``tests/gpu`` and ``benchmarks/bench_engram_staging.py``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from torch import nn

from tests.support.page_cache import PAGE, evict, read_pages, resident_fraction, resident_pages  # noqa: F401

ENGRAM_RELPATH = "vllm/models/deepseek_v41/common/engram.py"


# --------------------------------------------------------------------------
# vllm.* stand-ins
# --------------------------------------------------------------------------


class TP:
    """The tensor-parallel rank the next ParallelEngramEmbedding is built on."""

    size = 1
    rank = 0


class VllmConfigHolder:
    """What ``get_current_vllm_config()`` returns; tests set its fields."""

    config: Any = None


def parallel_config(enable_dbo: bool = False, ubatch_size: int = 0, data_parallel_size: int = 1) -> SimpleNamespace:
    """vLLM 0.34.0's ParallelConfig fields for micro-batching and DP
    (`use_ubatching` is its property: `enable_dbo or ubatch_size > 1`)."""
    return SimpleNamespace(
        enable_dbo=enable_dbo,
        ubatch_size=ubatch_size,
        use_ubatching=enable_dbo or ubatch_size > 1,
        data_parallel_size=data_parallel_size,
    )


def vllm_config(max_tokens: int, cpu_offload: bool = False, parallel: SimpleNamespace | None = None) -> SimpleNamespace:
    """The fields engram.py reads (vLLM 0.34.0 has no `use_v2_model_runner`:
    the V2 runner is the only GPU runner)."""
    return SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_batched_tokens=max_tokens),
        engram_config=SimpleNamespace(cpu_offload=cpu_offload, dp_shared_memory=False, use_thp=False),
        parallel_config=parallel or parallel_config(),
        lora_config=None,
    )


class _Logger(logging.LoggerAdapter):  # type: ignore[type-arg]
    def info_once(self, *args: Any, **kwargs: Any) -> None:
        self.info(*args, **kwargs)

    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        self.warning(*args, **kwargs)


class ColumnParallelLinear(nn.Module):
    """One rank's bf16 projection (TP 1: the whole matrix)."""

    def __init__(self, input_size: int, output_size: int, **_: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(output_size, input_size, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight)


class _CudaPlatform:
    def is_cuda(self) -> bool:
        return True

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_device_capability(self, capability: tuple[int, int], device_id: int = 0) -> bool:
        return torch.cuda.get_device_capability(device_id) == tuple(capability)

    def is_device_capability_family(self, capability: int, device_id: int = 0) -> bool:
        major, minor = torch.cuda.get_device_capability(device_id)
        return (major * 10 + minor) // 10 == capability // 10


class _UvaView:
    """``__cuda_array_interface__`` of a pinned host tensor: under UVA its
    device address is its host address, so torch wraps it without a copy."""

    def __init__(self, tensor: torch.Tensor) -> None:
        assert tensor.is_pinned() and tensor.is_contiguous()
        self._tensor = tensor
        typestr = {torch.uint8: "|u1", torch.int32: "<i4", torch.int64: "<i8", torch.bfloat16: "<u2"}
        dtype = torch.uint8 if tensor.dtype == torch.float8_e4m3fn else tensor.dtype
        self.__cuda_array_interface__ = {
            "shape": tuple(tensor.shape),
            "typestr": typestr[dtype],
            "data": (tensor.data_ptr(), False),
            "version": 3,
        }


def get_accelerator_view_from_cpu_tensor(cpu_tensor: torch.Tensor) -> torch.Tensor:
    view = torch.as_tensor(_UvaView(cpu_tensor), device="cuda")
    return view.view(cpu_tensor.dtype) if cpu_tensor.dtype == torch.float8_e4m3fn else view


def _module(name: str, **attrs: Any) -> ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _not_here(name: str) -> Any:
    def fail(*_: Any, **__: Any) -> Any:
        raise AssertionError(f"{name} is not part of a single-rank Engram run")

    return fail


def install_vllm_stubs() -> None:
    """Put the ``vllm.*`` modules engram.py imports into ``sys.modules``."""
    if isinstance(sys.modules.get("vllm"), ModuleType) and getattr(sys.modules["vllm"], "_imgbuild_stub", False):
        return
    image_sentinel = 128815  # only compared against; text tokens stay below it
    modules = {
        "vllm": _module("vllm", _imgbuild_stub=True),
        "vllm.compilation": _module("vllm.compilation"),
        "vllm.compilation.breakable_cudagraph": _module(
            "vllm.compilation.breakable_cudagraph", eager_break_during_capture=lambda fn: fn
        ),
        "vllm.config": _module(
            "vllm.config", VllmConfig=object, get_current_vllm_config=lambda: VllmConfigHolder.config
        ),
        "vllm.distributed": _module(
            "vllm.distributed",
            get_dp_group=_not_here("get_dp_group"),
            get_engram_dp_group=lambda: None,
            get_engram_dp_size=lambda: 1,
            get_tensor_model_parallel_rank=lambda: TP.rank,
            get_tensor_model_parallel_world_size=lambda: TP.size,
            tensor_model_parallel_all_gather=_not_here("tensor_model_parallel_all_gather"),
        ),
        "vllm.distributed.device_communicators": _module("vllm.distributed.device_communicators"),
        "vllm.distributed.device_communicators.shm_broadcast": _module(
            "vllm.distributed.device_communicators.shm_broadcast",
            SHM_PATH="/dev/shm",
            check_shm_free_space=lambda *a, **k: None,
        ),
        "vllm.distributed.parallel_state": _module(
            "vllm.distributed.parallel_state",
            GroupCoordinator=object,
            in_the_same_node_as=_not_here("in_the_same_node_as"),
        ),
        "vllm.forward_context": _module(
            "vllm.forward_context",
            get_forward_context=_not_here("get_forward_context"),
            is_forward_context_available=lambda: False,
        ),
        "vllm.logger": _module("vllm.logger", init_logger=lambda name: _Logger(logging.getLogger(name), {})),
        "vllm.model_executor": _module("vllm.model_executor"),
        "vllm.model_executor.layers": _module("vllm.model_executor.layers"),
        "vllm.model_executor.layers.fusion": _module("vllm.model_executor.layers.fusion"),
        "vllm.model_executor.layers.fusion.quant_activation": _module(
            "vllm.model_executor.layers.fusion.quant_activation", QuantizedActivation=object
        ),
        "vllm.model_executor.layers.linear": _module(
            "vllm.model_executor.layers.linear", ColumnParallelLinear=ColumnParallelLinear
        ),
        "vllm.model_executor.layers.quantization": _module(
            "vllm.model_executor.layers.quantization", QuantizationConfig=object
        ),
        "vllm.model_executor.layers.quantization.utils": _module("vllm.model_executor.layers.quantization.utils"),
        "vllm.model_executor.layers.quantization.utils.quant_utils": _module(
            "vllm.model_executor.layers.quantization.utils.quant_utils", kMxfp8Dynamic=object()
        ),
        "vllm.model_executor.utils": _module(
            "vllm.model_executor.utils",
            set_weight_attrs=lambda param, attrs: [setattr(param, k, v) for k, v in (attrs or {}).items()],
        ),
        "vllm.models": _module("vllm.models"),
        "vllm.models.deepseek_v41": _module("vllm.models.deepseek_v41"),
        "vllm.models.deepseek_v41.common": _module("vllm.models.deepseek_v41.common"),
        "vllm.models.deepseek_v41.common.ops": _module("vllm.models.deepseek_v41.common.ops"),
        "vllm.models.deepseek_v41.common.ops.query_quant": _module(
            "vllm.models.deepseek_v41.common.ops.query_quant",
            can_fuse_query_quant=lambda *a, **k: False,
            mxfp8_scale_bytes=_not_here("mxfp8_scale_bytes"),
            mxfp8_scale_offset=_not_here("mxfp8_scale_offset"),
        ),
        "vllm.models.deepseek_v41.common.mm_preprocess": _module(
            "vllm.models.deepseek_v41.common.mm_preprocess",
            image_sentinel_mask=lambda ids: ids == image_sentinel,
        ),
        "vllm.platforms": _module("vllm.platforms", current_platform=_CudaPlatform()),
        "vllm.triton_utils": _module("vllm.triton_utils", tl=tl, triton=triton),
        "vllm.utils": _module("vllm.utils"),
        "vllm.utils.cpu_resource_utils": _module(
            "vllm.utils.cpu_resource_utils", get_available_memory=_not_here("get_available_memory")
        ),
        "vllm.utils.platform_utils": _module("vllm.utils.platform_utils", is_uva_available=lambda: True),
        "vllm.utils.torch_utils": _module(
            "vllm.utils.torch_utils", get_accelerator_view_from_cpu_tensor=get_accelerator_view_from_cpu_tensor
        ),
    }
    sys.modules.update(modules)


def load_engram(path: Path, name: str) -> ModuleType:
    """Import one engram.py under its own module name."""
    install_vllm_stubs()
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------
# A DeepSeek-V4.1-shaped Engram: tables, hashing, layers
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """2 Engram layers x 24 hash heads (2- and 3-grams x 12 heads), 256 FP8
    bytes and 8 UE8M0 scale bytes a row: the DeepSeek-V4.1 row format."""

    layer_ids: tuple[int, ...] = (1, 14)
    vocab_size: int = 200_000  # per-head bucket count before the primes
    max_ngram: int = 3
    n_heads: int = 12
    head_dim: int = 256
    compressed_vocab: int = 129_280
    hidden: int = 1024
    hc_mult: int = 4
    max_tokens: int = 8192
    extra_rows: int = 7  # trailing table rows no head uses


@dataclass
class World:
    """One engram module, its layout and hash op, and a table directory."""

    mod: ModuleType
    shape: Shape
    layout: Any
    hash_state: nn.Module
    table_dir: Path
    tables: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def layout_config(shape: Shape, mod: ModuleType) -> SimpleNamespace:
    config = SimpleNamespace(
        engram_layer_ids=shape.layer_ids,
        engram_max_ngram_size=shape.max_ngram,
        engram_n_heads=shape.n_heads,
        engram_head_dim=shape.head_dim,
        engram_compressed_vocab_size=shape.compressed_vocab,
        engram_pad_token_id=0,
        engram_vocab_size=shape.vocab_size,
        engram_num_embeddings=(1,) * len(shape.layer_ids),
        hidden_size=shape.hidden,
        hc_mult=shape.hc_mult,
        rms_norm_eps=1e-6,
    )
    sizes = mod.EngramLayout(config).primes
    config.engram_num_embeddings = tuple(sum(p for order in layer for p in order) + shape.extra_rows for layer in sizes)
    return config


def make_hash_state(mod: ModuleType, layout: Any, shape: Shape) -> Any:
    """The release's NgramHashState (stateless since vLLM 0.34.0: the runner
    supplies every lookback id), without a tokenizer: token ids map onto the
    compressed vocabulary by modulo. The bound KV cache only tells that the
    forward runs Engram (ensure_cache)."""
    state = mod.NgramHashState.__new__(mod.NgramHashState)
    nn.Module.__init__(state)
    state.layout = layout
    state.swa_cache_module = SimpleNamespace(kv_cache=torch.ones(1, device="cuda"), block_size=64)
    state.lookback_depth = layout.max_ngram_size - 1
    state.pad_id = 0
    token_map = torch.arange(shape.compressed_vocab * 2, dtype=torch.int32) % shape.compressed_vocab
    multipliers = mod.compute_hash_multipliers(layout.layer_ids, layout.max_ngram_size, shape.compressed_vocab)
    state.register_buffer("token_map", token_map.cuda(), persistent=False)
    state.register_buffer("primes", torch.tensor(layout.primes).cuda(), persistent=False)
    state.register_buffer("offsets", layout.offsets.cuda(), persistent=False)
    state.register_buffer("multipliers", multipliers.cuda(), persistent=False)
    return state


def random_table(rows: int, width: int, seed: int, scales: bool) -> np.ndarray:
    """FP8 E4M3 bytes without NaN (0x7f, 0xff), or UE8M0 exponents near 1.0."""
    rng = np.random.default_rng(seed)
    if scales:
        return rng.integers(120, 135, size=(rows, width), dtype=np.uint8)
    data = np.frombuffer(rng.bytes(rows * width), dtype=np.uint8).reshape(rows, width).copy()
    data[(data & 0x7F) == 0x7F] = 0
    return data


def write_checkpoint(
    path: Path, config: SimpleNamespace, shape: Shape, seed: int = 0
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """One safetensors file holding each Engram layer's weight and scale, as
    the checkpoint stores them (F8_E4M3 and F8_E8M0)."""
    tables = {}
    header: dict[str, Any] = {}
    offset = 0
    for index, layer_id in enumerate(shape.layer_ids):
        rows = config.engram_num_embeddings[index]
        weight = random_table(rows, shape.head_dim, seed + 2 * index, scales=False)
        scale = random_table(rows, shape.head_dim // 32, seed + 2 * index + 1, scales=True)
        tables[layer_id] = (weight, scale)
        for name, data, dtype in (("weight", weight, "F8_E4M3"), ("scale", scale, "F8_E8M0")):
            header[f"model.layers.{layer_id}.engram.embed.{name}"] = {
                "dtype": dtype,
                "shape": list(data.shape),
                "data_offsets": [offset, offset + data.nbytes],
            }
            offset += data.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for layer_id in shape.layer_ids:
            for data in tables[layer_id]:
                f.write(data.tobytes())
    return tables


@contextmanager
def env(**values: str | None) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def make_engram(
    mod: ModuleType,
    layout: Any,
    config: SimpleNamespace,
    index: int,
    mode: str,
    table_dir: Path | None,
    tables: dict[int, tuple[np.ndarray, np.ndarray]],
    reference: nn.Module | None = None,
    parallel: SimpleNamespace | None = None,
) -> Any:
    """Engram layer `index` with its table in HBM (``hbm``), pinned host
    memory (``host``) or on disk (``disk``); weights copied from `reference`;
    `parallel` is the vLLM ParallelConfig it loads under (one rank, no
    micro-batches by default)."""
    VllmConfigHolder.config = vllm_config(
        8192 if reference is None else reference.staged_rows.shape[0], cpu_offload=mode == "host", parallel=parallel
    )
    disk = (
        {"DSV41_ENGRAM_DISK": "1", "DSV41_ENGRAM_DIR": str(table_dir)}
        if mode == "disk"
        else {"DSV41_ENGRAM_DISK": None}
    )
    with env(**disk), torch.device("cuda"):
        engram = mod.Engram(config, None, layout, index, use_sequence_parallel=False, prefix=f"layers.{index}")
    table = engram.embed_tokens
    if mode != "disk":
        weight, scale = tables[layout.layer_ids[index]]
        part = slice(table.vocab_start_idx, table.vocab_start_idx + table.part_num_embeddings)
        table.weight.data.view(torch.uint8).copy_(torch.from_numpy(weight[part]))
        table.weight_scale_inv.data.copy_(torch.from_numpy(scale[part]))
    if reference is None:
        generator = torch.Generator(device="cuda").manual_seed(1234 + index)
        for param in (engram.wkv.weight, engram.q_weight, engram.k_weight):
            param.data.copy_(torch.randn(param.shape, generator=generator, device="cuda") * 0.05)
    else:
        for mine, theirs in (
            (engram.wkv.weight, reference.wkv.weight),
            (engram.q_weight, reference.q_weight),
            (engram.k_weight, reference.k_weight),
        ):
            mine.data.copy_(theirs.data)
    return engram


# --------------------------------------------------------------------------
# Batches as the V2 runner hands them to the hash op
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor
    positions: torch.Tensor
    query_start_loc: torch.Tensor
    lookback: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


def make_batch(
    query_lens: list[int], seed: int, depth: int = 2, pad_to: int | None = None, vocab: int = 120_000
) -> Batch:
    """Requests with `query_lens` new tokens each (1 = decode), random token
    ids, each request `17 * i` tokens into its sequence; `pad_to` pads the
    token count as a CUDA graph bucket does (padding repeats the last id)."""
    rng = np.random.default_rng(seed)
    total = sum(query_lens)
    num_tokens = pad_to or total
    ids = rng.integers(1, vocab, size=num_tokens).astype(np.int32)
    positions = np.zeros(num_tokens, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(query_lens))).astype(np.int32)
    for i, (begin, n) in enumerate(zip(starts[:-1], query_lens, strict=False)):
        positions[begin : begin + n] = 17 * i + np.arange(n)
    lookback = rng.integers(1, vocab, size=(len(query_lens), depth)).astype(np.int32)
    return Batch(
        torch.from_numpy(ids).cuda(),
        torch.from_numpy(positions).cuda(),
        torch.from_numpy(starts).cuda(),
        torch.from_numpy(lookback).cuda(),
    )


def hash_batch(hash_state: nn.Module, mod: ModuleType, batch: Batch) -> torch.Tensor:
    """The forward's hash ids `[tokens, layers, heads]` for `batch` (vLLM
    0.34.0's six inputs: no slot mapping or block table)."""
    mask = sys.modules["vllm.models.deepseek_v41.common.mm_preprocess"].image_sentinel_mask
    return hash_state(
        batch.input_ids,
        batch.positions,
        batch.query_start_loc,
        mask(batch.input_ids),
        batch.lookback,
        mask(batch.lookback),
    )


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, so equality is bit equality (NaN included)."""
    return tensor.contiguous().view(torch.uint8)


# --------------------------------------------------------------------------
# Speculative decoding: verify steps as DSpark k=5 makes them
# --------------------------------------------------------------------------


def spec_verify_steps(
    num_reqs: int, k: int, steps: int, seed: int, depth: int = 2, vocab: int = 120_000
) -> list[Batch]:
    """Verify steps of `num_reqs` requests, each with k+1 positions: the last
    sampled token then k drafts. After each step a random number of drafts
    is accepted and the rest rolled back, so the next step starts right after
    the accepted ones, with a fresh token in place of the first rejected
    draft; its lookback ids are the committed tokens before it."""
    rng = np.random.default_rng(seed)
    seqs = [list(rng.integers(1, vocab, size=20 + 7 * i)) for i in range(num_reqs)]
    batches = []
    for _ in range(steps):
        ids: list[int] = []
        positions: list[int] = []
        lookback = np.full((num_reqs, depth), -1, dtype=np.int32)
        drafts = []
        for r, seq in enumerate(seqs):
            start = len(seq) - 1  # the last sampled token is not in the KV cache yet
            draft = list(rng.integers(1, vocab, size=k))
            drafts.append(draft)
            ids += [seq[-1], *draft]
            positions += list(range(start, start + k + 1))
            for j in range(depth):
                lookback[r, j] = seq[start - 1 - j]
        starts = np.arange(num_reqs + 1, dtype=np.int32) * (k + 1)
        batches.append(
            Batch(
                torch.tensor(ids, dtype=torch.int32).cuda(),
                torch.tensor(positions, dtype=torch.int64).cuda(),
                torch.from_numpy(starts).cuda(),
                torch.from_numpy(lookback).cuda(),
            )
        )
        for seq, draft in zip(seqs, drafts, strict=True):
            accepted = int(rng.integers(0, k + 1))
            seq += draft[:accepted]  # rejected drafts are rolled back
            seq.append(int(rng.integers(1, vocab)))  # the token sampled after them
    return batches
