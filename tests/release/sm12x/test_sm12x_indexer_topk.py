"""Decode top-k on SM12x (patch 0004 sparse_attn_indexer.py).

The gate is the patched ``_decode_topk_backend``; the dispatch is the release's
own ``SparseIndexerTopk`` (indexer_topk.py), with the custom ops recorded
instead of launched.

Only a GB10 shows what ``top_k_per_row_decode`` returns on SM 12.1, and how
fast.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.support import needs

torch = needs.module("torch", "release", "the SM12x and Engram patch tests run the patched code on CPU torch")

pytestmark = pytest.mark.release

INDEXER = "vllm/model_executor/layers/sparse_attn_indexer.py"
TOPK = "vllm/model_executor/layers/indexer_topk.py"


def decode_topk_backend(patched_source, platform):
    return patched_source.load(INDEXER, ["_decode_topk_backend"], {"current_platform": platform})[
        "_decode_topk_backend"
    ]


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((12, 1), "per_row"),  # GB10: not excluded by an exact (12, 0) gate
        ((12, 0), "per_row"),
        ((10, 0), "auto"),
        ((10, 3), "auto"),
        ((9, 0), "auto"),
        (None, "auto"),
    ],
)
def test_auto_resolves_to_per_row_on_the_sm12x_family(patched_source, make_platform, capability, expected):
    resolve = decode_topk_backend(patched_source, make_platform(capability))
    assert resolve("auto") == expected


@pytest.mark.parametrize("explicit", ["persistent", "cooperative", "flashinfer", "torch"])
def test_an_explicit_backend_is_kept(patched_source, make_platform, explicit):
    resolve = decode_topk_backend(patched_source, make_platform((12, 1)))
    assert resolve(explicit) == explicit


def test_rocm_is_untouched(patched_source, make_platform):
    from vllm.platforms.interface import PlatformEnum

    resolve = decode_topk_backend(patched_source, make_platform((12, 1), PlatformEnum.ROCM))
    assert resolve("auto") == "auto"


class Ops:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def top_k_per_row_decode(self, *args) -> None:
        self.calls.append(("top_k_per_row_decode", args))


def release_topk(patched_source, platform, ops):
    return patched_source.load(
        TOPK,
        ["SparseIndexerTopk", "AUTO_COOPERATIVE_MAX_ROWS", "RADIX_TOPK_WORKSPACE_SIZE"],
        {
            "torch": torch,
            "ops": ops,
            "current_platform": platform,
            "has_flashinfer": lambda: False,
            "_HAS_DEEP_SELECT_C": False,
            "get_current_vllm_config": lambda: SimpleNamespace(
                kernel_config=SimpleNamespace(sparse_indexer_topk_backend="auto")
            ),
        },
    )["SparseIndexerTopk"]


def test_sm12x_decode_runs_top_k_per_row_decode(patched_source, make_platform):
    platform = make_platform((12, 1))
    ops = Ops()
    topk_cls = release_topk(patched_source, platform, ops)
    logits = torch.randn(4, 4096)
    seq_lens = torch.full((4, 1), 3000, dtype=torch.int32)
    out = torch.empty(4, 2048, dtype=torch.int32)

    # Unpatched, "auto" falls to persistent_topk on SM 12.1.
    assert topk_cls("auto").resolve_backend(logits, 2048, 4) == "persistent"

    backend = decode_topk_backend(patched_source, platform)("auto")
    topk = topk_cls(backend)
    assert topk.resolve_backend(logits, 2048, 4) == "per_row"
    topk(logits, seq_lens, 1, out, 2048, 3000)
    assert [name for name, _ in ops.calls] == ["top_k_per_row_decode"]
    args = ops.calls[0][1]
    assert args[0] is logits and args[2] is seq_lens and args[3] is out
    assert args[1:2] == (1,) and args[4:] == (4, logits.stride(0), logits.stride(1), 2048)
