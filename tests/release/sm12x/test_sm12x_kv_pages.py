"""SM12x KV pages (patches 0001 attention.py and 0002 flashinfer_sparse.py).

The cache specs are vLLM's own ``MLAAttentionSpec`` from the patched tree, so
page sizes and alignment padding are computed by the release code; the
capability comes from a vLLM ``Platform`` with a faked device capability.

Only a GB10 shows that FlashInfer's SM12x sparse-MLA kernels and DeepGEMM's
paged MQA logits read these 64-state pages correctly, and that the KV cache
planner packs the compressed and indexer pages into blocks as computed here.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.support import needs

torch = needs.module("torch", "release", "the SM12x and Engram patch tests run the patched code on CPU torch")

pytestmark = pytest.mark.release

ATTENTION = "vllm/models/deepseek_v41/attention.py"
FLASHINFER = "vllm/models/deepseek_v41/nvidia/flashinfer_sparse.py"

V4_RECORD = 584  # the packed V4 KV record the SM12x FlashInfer kernels read
INDEXER_ROW = 132  # fp8 indexer K row: 128 values + 4 scale bytes
CACHE_BLOCK = 128  # --block-size of the deployment recipes

SM12X = [(12, 0), (12, 1)]
OTHERS = [(10, 0), (10, 3), (9, 0), (8, 9), None]


class IndexerBackend:
    """Stands for the release's DeepseekV41IndexerBackend (128-token pages
    off SM90 and SM12x; test_release_indexer_gate_is_64_tokens reads the real one)."""

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [128]


class SparseIndexerBackend(IndexerBackend):
    pass


def load_attention(patched_source, platform):
    from vllm.v1.kv_cache_interface import KVQuantMode, MLAAttentionSpec

    def get_kv_quant_mode(kv_cache_dtype: str) -> KVQuantMode:
        # The release's mapping for the packed record, without importing
        # vllm.config (and its dependencies) for its dtype handlers.
        assert kv_cache_dtype == "fp8_ds_mla"
        return KVQuantMode.FP8_PER_TENSOR

    return patched_source.load(
        ATTENTION,
        [
            "_use_v41_mxfp8_kv_record",
            "SM12X_PAGE_STATES",
            "use_sm12x_kv_pages",
            "_kv_page_alignment",
            "_state_page_block_size",
            "DeepseekV41SM12xIndexerBackend",
            "DeepseekV4Attention.get_kv_cache_spec",
            "DeepseekV4IndexerCache.get_kv_cache_spec",
            "DeepseekV4IndexerCache.get_attn_backend",
        ],
        {
            "current_platform": platform,
            "torch": torch,
            "math": __import__("math"),
            "MLAAttentionSpec": MLAAttentionSpec,
            "get_kv_quant_mode": get_kv_quant_mode,
            "DeepseekV41IndexerBackend": IndexerBackend,
            "DeepseekV41SparseIndexerBackend": SparseIndexerBackend,
        },
    )


def vllm_config(cache_dtype: str = "fp8_ds_mla"):
    return SimpleNamespace(cache_config=SimpleNamespace(block_size=CACHE_BLOCK, cache_dtype=cache_dtype))


def compressed_spec(attn, compress_ratio: int):
    """The spec of a kv-source layer, as DeepseekV4Attention.__init__ and
    get_kv_cache_spec set it up for the packed V4 record."""
    layer = SimpleNamespace(
        is_kv_source=True,
        kv_cache_dtype="fp8_ds_mla",
        head_dim=512,
        kv_cache_torch_dtype=torch.uint8,
        compress_ratio=compress_ratio,
        kv_page_alignment=attn["_kv_page_alignment"](attn["_use_v41_mxfp8_kv_record"]()),
        compressed_bytes_per_token=V4_RECORD,
    )
    return attn["DeepseekV4Attention__get_kv_cache_spec"](layer, vllm_config())


def indexer_cache(compress_ratio: int):
    return SimpleNamespace(
        cache_config=vllm_config().cache_config,
        head_dim=INDEXER_ROW,
        dtype=torch.uint8,
        compress_ratio=compress_ratio,
        sparse_logits=False,
        rocm_mxfp4=False,
    )


@pytest.mark.parametrize("capability", SM12X + OTHERS)
def test_the_gate_is_the_sm12x_family(patched_source, make_platform, capability):
    attn = load_attention(patched_source, make_platform(capability))
    assert attn["use_sm12x_kv_pages"]() is (capability in SM12X)


def test_the_gate_needs_cuda(patched_source, make_platform):
    from vllm.platforms.interface import PlatformEnum

    rocm = make_platform((12, 1), PlatformEnum.ROCM)
    assert load_attention(patched_source, rocm)["use_sm12x_kv_pages"]() is False


@pytest.mark.parametrize("capability", SM12X)
@pytest.mark.parametrize("ratio", [1, 2])
def test_sm12x_compressed_pages_are_64_whole_records(patched_source, make_platform, capability, ratio):
    attn = load_attention(patched_source, make_platform(capability))
    spec = compressed_spec(attn, ratio)
    assert spec.num_states == 64
    assert spec.block_size == 64 * ratio
    # 64 x 584 B = 73 x 512 B: no padding, so page strides stay whole records
    # (FlashInfer's page view and _packed_block_span need that).
    assert spec.page_size_bytes == 64 * V4_RECORD == 37376
    assert spec.page_size_bytes % V4_RECORD == 0
    # The release's 576 B alignment would have padded the same page.
    released = type(spec)(
        block_size=spec.block_size,
        num_kv_heads=1,
        head_size=512,
        dtype=torch.uint8,
        tokens_per_state=ratio,
        cache_dtype_str="fp8_ds_mla",
        alignment=576,
        model_version="deepseek_v4",
        state_content_bytes=V4_RECORD,
    )
    assert released.page_size_bytes % V4_RECORD != 0


@pytest.mark.parametrize("capability", OTHERS)
@pytest.mark.parametrize("ratio", [1, 2])
def test_other_gpus_keep_the_released_pages(patched_source, make_platform, capability, ratio):
    attn = load_attention(patched_source, make_platform(capability))
    mxfp8 = attn["_use_v41_mxfp8_kv_record"]()
    assert attn["_kv_page_alignment"](mxfp8) == (512 if mxfp8 else 576)
    spec = compressed_spec(attn, ratio)
    assert spec.block_size == CACHE_BLOCK
    assert spec.num_states == CACHE_BLOCK // ratio
    indexer = attn["DeepseekV4IndexerCache__get_kv_cache_spec"](indexer_cache(ratio), vllm_config())
    assert indexer.block_size == CACHE_BLOCK
    assert indexer.alignment == (512 if mxfp8 else 576)
    backend = attn["DeepseekV4IndexerCache__get_attn_backend"](indexer_cache(ratio))
    assert backend is IndexerBackend


@pytest.mark.parametrize("capability", SM12X)
@pytest.mark.parametrize("ratio", [1, 2])
def test_sm12x_indexer_pages_hold_64_states(patched_source, make_platform, capability, ratio):
    attn = load_attention(patched_source, make_platform(capability))
    cache = indexer_cache(ratio)
    spec = attn["DeepseekV4IndexerCache__get_kv_cache_spec"](cache, vllm_config())
    assert spec.block_size == 64 * ratio
    assert spec.num_states == 64
    assert spec.alignment == 512
    assert spec.page_size_bytes >= 64 * INDEXER_ROW and spec.page_size_bytes % 512 == 0
    # The indexer backend accepts exactly that block, so the kernel block
    # size check finds a common size (the release's 128 does not divide 64).
    backend = attn["DeepseekV4IndexerCache__get_attn_backend"](cache)
    assert backend is attn["DeepseekV41SM12xIndexerBackend"]
    assert issubclass(backend, IndexerBackend)
    assert backend.get_supported_kernel_block_sizes(spec) == [spec.block_size]
    assert backend.get_supported_kernel_block_sizes() == [64]


INDEXER_BACKENDS = "vllm/v1/attention/backends/mla/indexer.py"


@pytest.mark.parametrize("capability", SM12X)
@pytest.mark.parametrize("ratio", [1, 2])
def test_release_indexer_gate_is_64_tokens_and_the_patch_keeps_64_states(
    patched_source, make_platform, capability, ratio
):
    """0.34.0's own DeepseekV41IndexerBackend declares 64-token kernel blocks on SM12x (indexer.py:316-321): the
    patch's 64 for an uncompressed cache, not for a compressed one, where the patch keeps 64 states per page (its
    header says why). If a release scales by tokens_per_state itself, this fails and the subclass can go."""
    platform = make_platform(capability)
    release = patched_source.load(
        INDEXER_BACKENDS,
        ["DeepseekV41IndexerBackend.get_supported_kernel_block_sizes"],
        {"current_platform": platform},
    )["DeepseekV41IndexerBackend__get_supported_kernel_block_sizes"]
    spec = SimpleNamespace(tokens_per_state=ratio)
    assert release(spec) == [64]
    attn = load_attention(patched_source, platform)
    assert attn["DeepseekV41SM12xIndexerBackend"].get_supported_kernel_block_sizes(spec) == [64 * ratio]


def load_flashinfer_backend(patched_source, attn, platform):
    return patched_source.load(
        FLASHINFER,
        ["DeepseekV4FlashInferMLASparseBackend.get_supported_kernel_block_sizes"],
        {
            # 0.34.0 gates the SM12x kernel block on the platform itself; the patch scales it by tokens_per_state.
            "current_platform": platform,
            "SM12X_PAGE_STATES": attn["SM12X_PAGE_STATES"],
            "use_sm12x_kv_pages": attn["use_sm12x_kv_pages"],
        },
    )["DeepseekV4FlashInferMLASparseBackend__get_supported_kernel_block_sizes"]


@pytest.mark.parametrize("capability", SM12X + OTHERS)
@pytest.mark.parametrize("ratio", [1, 2])
def test_flashinfer_kernel_block_matches_the_compressed_page(patched_source, make_platform, capability, ratio):
    platform = make_platform(capability)
    attn = load_attention(patched_source, platform)
    kernel_block_sizes = load_flashinfer_backend(patched_source, attn, platform)
    spec = compressed_spec(attn, ratio)
    if capability in SM12X:
        # 64-state kernel pages, equal to the spec's block: no splitting.
        assert kernel_block_sizes(spec) == [64 * ratio] == [spec.block_size]
        assert kernel_block_sizes() == [64]
    else:
        assert kernel_block_sizes(spec) == [128]
        assert kernel_block_sizes() == [128]
