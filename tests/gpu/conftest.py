"""The GPU tier: the patched Engram modules run for real on a CUDA GPU.

Marker ``gpu``; skipped without CUDA, never part of ``.ci/run``. Run it on a
CUDA machine with torch and triton (no vLLM needed):

    python3 tests/gpu/collect_sources.py /tmp/engram-src      # where imgbuild works
    IMGBUILD_GPU_SOURCES=/tmp/engram-src python3 -m pytest tests/gpu -m gpu --confcutdir=tests/gpu -p no:cacheprovider
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SOURCES = os.environ.get("IMGBUILD_GPU_SOURCES")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if not torch.cuda.is_available():
        reason = "needs a CUDA GPU"
    elif not SOURCES:
        reason = "set IMGBUILD_GPU_SOURCES (see tests/gpu/collect_sources.py)"
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def sources() -> Path:
    assert SOURCES
    return Path(SOURCES)
