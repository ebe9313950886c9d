"""What a tier needs, or the test fails saying what is missing and how to get it.

A tier that is asked for runs, or the run fails (CONTRIBUTING.md, "Tiers fail rather than skip"): a
missing tool or module is an error naming it and the set-up step that provides it, never a skip. The
one skip a run may report is an opt-in test, listed in `tests/conftest.py` (`ALLOWED_SKIPS`).
"""

from __future__ import annotations

import importlib
import shutil
from types import ModuleType

import pytest

SETUP_DEV = "`bash .ci/setup-dev.sh` installs it"
# how .ci/setup-dev.sh gets each thing it installs
HOW = {
    "torch": "`bash .ci/setup-dev.sh` installs it (CPU torch: `python3 -m pip install torch==2.13.0`)",
    "numpy": "`bash .ci/setup-dev.sh` installs it (`pip install -e '.[test]'`)",
    "docker-registry": "`bash .ci/setup-dev.sh` installs it (.ci/setup-host.sh: Debian's docker-registry package)",
    "cosign": "`bash .ci/setup-dev.sh` installs it (.ci/setup-host.sh: trixie's cosign 2.5)",
    "gcc": "`bash .ci/setup-dev.sh` installs it (.ci/setup-host.sh: Debian's gcc and libc6-dev)",
    "jq": "`bash .ci/setup-dev.sh` installs it (.ci/setup-host.sh: Debian's jq)",
}
GPU_HOW = (
    "on the GPU machine, install a CUDA build of torch (it brings triton) and numpy; .ci/setup-dev.sh installs "
    "only CPU torch, and the GPU tier is run by hand (CONTRIBUTING.md, The GPU tier)"
)


def module(name: str, tier: str, why: str, how: str | None = None) -> ModuleType:
    """`import name`, or fail (at collection, when called at a test module's top) naming it and the fix."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        problem = str(exc)
    pytest.fail(
        f"the {tier} tier needs the Python module {name} ({why}), and it does not import: {problem}; "
        f"{how or HOW.get(name, SETUP_DEV)}",
        pytrace=False,
    )


def tool(name: str, tier: str, why: str, how: str | None = None) -> str:
    """The path of the program `name` on PATH, or fail naming it and the fix."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"the {tier} tier needs the program {name} ({why}), and it is not on PATH; "
            f"{how or HOW.get(name, SETUP_DEV)}",
            pytrace=False,
        )
    return path
