"""The Docker engine, a room with a module per job: `client.py` (connect, `reads_kept`, image, tag, pull), `build.py`
(buildx, the naming race), `containers.py` (run, file digests, leftovers, the owner label) and `door.py`, the one
door to the docker CLI (builds and `registry/tools.py` go through it). `Engine` (`engine.py`) is all of them.

The names are imported from here (`from imgbuild.engine import Engine`), each on first use: `door.py` needs no docker
SDK, and `registry/` and `plan/` import it through this package."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from imgbuild.engine.build import RACED
    from imgbuild.engine.client import CONTAINERD_SNAPSHOTTER, ImageInfo, engine_problem
    from imgbuild.engine.containers import BINFMT_FIX, RunResult, check_binfmt, held_interrupts
    from imgbuild.engine.engine import Engine

__all__ = [
    "BINFMT_FIX",
    "CONTAINERD_SNAPSHOTTER",
    "RACED",
    "Engine",
    "ImageInfo",
    "RunResult",
    "check_binfmt",
    "engine_problem",
    "held_interrupts",
]

_MODULE = {
    "RACED": "build",
    "CONTAINERD_SNAPSHOTTER": "client",
    "ImageInfo": "client",
    "engine_problem": "client",
    "BINFMT_FIX": "containers",
    "RunResult": "containers",
    "check_binfmt": "containers",
    "held_interrupts": "containers",
    "Engine": "engine",
}


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
