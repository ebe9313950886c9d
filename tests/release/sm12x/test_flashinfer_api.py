"""vLLM 0.34.0's FlashInfer imports and calls against the pinned FlashInfer
(0.7.4, where vLLM asks for 0.7.3: patches/upstream.yaml's override), in the
patched tree the images get (`imgbuild patches apply`), resolved statically
by ``flashinfer_api.check`` (issue 46 item 7). A name vLLM imports that
FlashInfer lacks, or a call whose arguments its signature refuses, fails
here, unless it is one of KNOWN, each with where vLLM reaches it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.release.sm12x.flashinfer_api import FlashInferTree, check

pytestmark = pytest.mark.release

# Found by this check on 2026-12-05. Both are in DeepSeek-V4.1's specialized
# decode, which runs only on a GB300 (SM103: specialized_decode/__init__.py
# unsupported(), "a GB300 (SM103) GPU") and only with a FlashInfer it checked
# (uses_checked_flashinfer): never on a DGX Spark (SM 12.1). FlashInfer
# 0.7.2.post1's gemm/gemm_base.py imports _get_cache_buf from ..utils; 0.7.4's
# no longer does (it is still flashinfer.utils._get_cache_buf), so on a GB300
# with 0.7.4 these two calls would raise AttributeError.
KNOWN = {
    "vllm/models/deepseek_v41/nvidia/specialized_decode/attention/mxfp8.py: "
    "flashinfer.gemm.gemm_base._get_cache_buf: not found",
    "vllm/models/deepseek_v41/nvidia/specialized_decode/boundary/publishing_gemm.py: "
    "flashinfer.gemm.gemm_base._get_cache_buf: not found",
}


def _versions(tree: Path) -> tuple[str, str]:
    vllm = re.search(r"__version__ = version = '([^']+)'", (tree / "vllm" / "_version.py").read_text())
    flashinfer = re.search(r'__version__ = "([^"]+)"', (tree / "flashinfer" / "_build_meta.py").read_text())
    assert vllm and flashinfer
    return vllm.group(1), flashinfer.group(1)


def test_every_flashinfer_import_and_call_of_vllm_resolves_in_the_pinned_flashinfer(patched_tree: Path) -> None:
    assert _versions(patched_tree) == ("0.34.0", "0.7.4")
    report = check(patched_tree, FlashInferTree(patched_tree))
    # The whole surface was walked (2026-12-05: 287 imported names, 233 calls
    # checked, 80 calls to values, decorated functions or classes without
    # their own __init__, counted apart).
    assert report.imports >= 250, report.imports
    assert report.calls_checked >= 200, report.calls_checked
    found = {re.sub(r":\d+: ", ": ", problem, count=1) for problem in report.problems}
    assert found - KNOWN == set(), "vLLM uses FlashInfer names or signatures the pinned FlashInfer lacks"
    assert found == KNOWN, f"no longer found, drop from KNOWN: {sorted(KNOWN - found)}"


def test_the_check_fails_on_a_missing_name_or_a_call_its_signature_refuses(tmp_path: Path) -> None:
    package = tmp_path / "flashinfer"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .ops import norm as norm\nfrom .sub import *\n")
    (package / "ops.py").write_text(
        "import functools\n"
        "def norm(x, weight, *, eps=1e-6, out=None): ...\n"
        "class Wrapper:\n    def __init__(self, workspace, layout='NHD'): ...\n"
        "@functools.cache\ndef cached(a, b=0): ...\n"
    )
    (package / "sub" / "__init__.py").write_text("__all__ = ['kernel']\ndef kernel(a, /, b): ...\n")
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "use.py").write_text(
        "import flashinfer\n"
        "from flashinfer import norm, kernel, gone\n"
        "from flashinfer.ops import Wrapper, cached\n"
        "def f(x, w, ws):\n"
        "    norm(x, w, eps=1e-5)\n"  # fine
        "    norm(x, w, 1e-5)\n"  # eps is keyword-only
        "    norm(x, epsilon=1e-5)\n"  # no such keyword
        "    norm(x)\n"  # weight missing
        "    flashinfer.norm(x, w, out=x)\n"  # fine, through the package
        "    kernel(x, b=1)\n"  # fine
        "    kernel(a=x, b=1)\n"  # a is positional-only
        "    Wrapper(ws, layout='HND')\n"  # fine: __init__ without self
        "    Wrapper(ws, kv_layout='HND')\n"
        "    cached(1, 2, 3)\n"
        "    norm(*x)\n"  # not checkable positionally; passes
        "    from flashinfer.ops import missing_too\n"
    )
    report = check(tmp_path, FlashInferTree(tmp_path))
    assert report.imports == 7
    assert report.calls_checked == 11
    problems = [re.sub(r" \(flashinfer/[^)]*\)", "", p) for p in report.problems]
    assert problems == [
        "vllm/use.py:2: from flashinfer import gone: not found",
        "vllm/use.py:16: from flashinfer.ops import missing_too: not found",
        "vllm/use.py:6: flashinfer.norm: 3 positional arguments, it takes 2",
        "vllm/use.py:7: flashinfer.norm: no parameter epsilon",
        "vllm/use.py:8: flashinfer.norm: required weight not given",
        "vllm/use.py:11: flashinfer.kernel: no parameter a",
        "vllm/use.py:13: flashinfer.ops.Wrapper: no parameter kv_layout",
        "vllm/use.py:14: flashinfer.ops.cached: 3 positional arguments, it takes 2",
    ]
