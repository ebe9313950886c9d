"""The SWA block-size hook (patch 0003 sparse_swa.py) and the FlashInfer
backend's SM12x override of it (patch 0002 flashinfer_sparse.py).

``DeepseekV4SWACache`` and the backends are the patched classes; their base
classes and the vLLM config are stand-ins. The spec is vLLM's own
``SlidingWindowMLASpec``.

Only a GB10 shows the sliding-window decode and prefill kernels on 64-token
pages.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.support import needs

torch = needs.module("torch", "release", "the SM12x and Engram patch tests run the patched code on CPU torch")

pytestmark = pytest.mark.release

SPARSE_SWA = "vllm/v1/attention/backends/mla/sparse_swa.py"
FLASHINFER = "vllm/models/deepseek_v41/nvidia/flashinfer_sparse.py"
ATTENTION = "vllm/models/deepseek_v41/attention.py"
V41_REQUESTED = 32  # what DeepseekV4Attention passes for its SWA cache
V4_RECORD = 584


class AttentionBackend:
    @classmethod
    def get_name(cls) -> str:
        return cls.__name__


class AttentionLayerBase:
    pass


def config():
    return SimpleNamespace(compilation_config=SimpleNamespace(static_forward_context={}))


def load(patched_source, platform):
    from vllm.v1.kv_cache_interface import KVQuantMode, SlidingWindowMLASpec

    swa = patched_source.load(
        SPARSE_SWA,
        ["DeepseekV4SWACache", "DeepseekSparseSWABackend"],
        {
            "torch": torch,
            "AttentionBackend": AttentionBackend,
            "AttentionLayerBase": AttentionLayerBase,
            "MultipleOf": lambda base: ("MultipleOf", base),
            "get_current_vllm_config": config,
            "SlidingWindowMLASpec": SlidingWindowMLASpec,
            "get_kv_quant_mode": lambda dtype: KVQuantMode.FP8_PER_TENSOR,
            "current_platform": platform,
        },
    )
    attn = patched_source.load(
        ATTENTION,
        ["SM12X_PAGE_STATES", "use_sm12x_kv_pages"],
        {"current_platform": platform},
    )
    flashinfer = patched_source.load(
        FLASHINFER,
        ["DeepseekSparseSWAFlashInferBackend"],
        {
            "DeepseekSparseSWABackend": swa["DeepseekSparseSWABackend"],
            "SM12X_PAGE_STATES": attn["SM12X_PAGE_STATES"],
            "use_sm12x_kv_pages": attn["use_sm12x_kv_pages"],
        },
    )
    return swa, flashinfer["DeepseekSparseSWAFlashInferBackend"]


def swa_cache(swa, backend, **kwargs):
    return swa["DeepseekV4SWACache"](
        head_dim=512,
        window_size=128,
        dtype=torch.uint8,
        prefix="model.layers.0.attn.swa_cache",
        cache_config=SimpleNamespace(cache_dtype="fp8_ds_mla"),
        backend_cls=backend,
        packed_bytes_per_token=V4_RECORD,
        packed_page_alignment=512,
        **kwargs,
    )


@pytest.mark.parametrize("capability", [(12, 0), (12, 1), (10, 0), (9, 0)])
def test_default_backend_keeps_the_requested_size(patched_source, make_platform, capability):
    swa, _ = load(patched_source, make_platform(capability))
    backend = swa["DeepseekSparseSWABackend"]
    assert backend.get_swa_block_size(V41_REQUESTED) == V41_REQUESTED
    assert swa_cache(swa, None, block_size=V41_REQUESTED).block_size == V41_REQUESTED
    assert swa_cache(swa, None).block_size == 64  # DeepSeek-V4's default


@pytest.mark.parametrize(
    ("capability", "expected"),
    [((12, 1), 64), ((12, 0), 64), ((10, 0), 32), ((10, 3), 32), ((9, 0), 32)],
)
def test_flashinfer_backend_sets_64_token_blocks_on_sm12x(patched_source, make_platform, capability, expected):
    swa, flashinfer = load(patched_source, make_platform(capability))
    cache = swa_cache(swa, flashinfer, block_size=V41_REQUESTED)
    assert cache.block_size == expected
    spec = cache.get_kv_cache_spec(SimpleNamespace())
    assert spec.block_size == expected
    if expected == 64:
        # 64 x 584 B = 73 x 512 B: a whole-record page with no padding.
        assert spec.page_size_bytes == 64 * V4_RECORD


def test_a_substituted_size_must_be_a_multiple_of_32(patched_source, make_platform):
    swa, _ = load(patched_source, make_platform((12, 1)))
    base = swa["DeepseekSparseSWABackend"]

    class Odd(base):
        @classmethod
        def get_swa_block_size(cls, requested_block_size: int) -> int:
            return 48

    with pytest.raises(ValueError, match="multiple of 32"):
        swa_cache(swa, Odd, block_size=V41_REQUESTED)

    class Same(base):
        @classmethod
        def get_swa_block_size(cls, requested_block_size: int) -> int:
            return requested_block_size

    # A caller's own size is taken as before, checked or not.
    assert swa_cache(swa, Same, block_size=16).block_size == 16
