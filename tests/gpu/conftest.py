"""The GPU tier: the patched Engram modules run for real on a CUDA GPU.

Marker ``gpu``; never part of ``.ci/run``. Asked for (``-m gpu``), it runs or
fails: no torch, triton or numpy, no CUDA device, or no ``IMGBUILD_GPU_SOURCES``
is an error naming what is missing, never a skip. Run it on a CUDA machine with
torch and triton (no vLLM needed):

    python3 tests/gpu/collect_sources.py /tmp/engram-src      # where imgbuild works
    IMGBUILD_GPU_SOURCES=/tmp/engram-src python3 -m pytest tests/gpu -m gpu --confcutdir=tests/gpu -p no:cacheprovider
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from tests.support import needs

SOURCES = os.environ.get("IMGBUILD_GPU_SOURCES")
MODULES = {
    "torch": "the Engram modules run on it",
    "triton": "the release's Engram kernels are Triton kernels",
    "numpy": "the tables are written with it",
}


def missing() -> str | None:
    """What the GPU tier lacks on this machine, said with the fix; None when it can run."""
    for name, why in MODULES.items():
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return (
                f"the GPU tier needs the Python module {name} ({why}), and it does not import: {exc}; {needs.GPU_HOW}"
            )
    import torch

    if not torch.cuda.is_available():
        return (
            f"the GPU tier needs a CUDA device and torch {torch.__version__} sees none "
            f"(torch.version.cuda={torch.version.cuda}); run it on a CUDA machine with a CUDA build of torch"
        )
    if not SOURCES:
        return (
            "the GPU tier needs IMGBUILD_GPU_SOURCES: run `python3 tests/gpu/collect_sources.py /tmp/engram-src` "
            "where imgbuild works, copy /tmp/engram-src to this machine and set IMGBUILD_GPU_SOURCES=/tmp/engram-src"
        )
    if not (Path(SOURCES) / "patched" / "engram.py").is_file():
        return f"IMGBUILD_GPU_SOURCES={SOURCES} holds no patched/engram.py: make it with tests/gpu/collect_sources.py"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session", autouse=True)
def _gpu_tier_can_run() -> None:
    """Asked for, the tier runs or every test errors naming what is missing (never a skip)."""
    problem = missing()
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def sources() -> Path:
    assert SOURCES
    return Path(SOURCES)
