"""Modules loaded on first attribute access (importlib's LazyLoader), for heavy SDKs off the hot paths."""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

_LOADING = threading.RLock()


def module(name: str) -> ModuleType:
    """`name`, imported when one of its attributes is first read; the module itself if already imported."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    found = importlib.util.module_from_spec(spec)
    sys.modules[name] = found
    loader.exec_module(found)
    return found


def loaded(found: ModuleType) -> ModuleType:
    """`found` (from `module`) run now, by one thread at a time.

    Before Python 3.12, LazyLoader marks a module loaded before running it, so a second thread that reads
    it meanwhile finds attributes missing (two smoke workers making their first SDK client at once).
    """
    with _LOADING:
        getattr(found, "__name__", None)  # any attribute read runs it
    return found
