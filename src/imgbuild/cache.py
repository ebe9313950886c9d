"""Where imgbuild keeps what it fetches and makes: $IMGBUILD_CACHE, else $XDG_CACHE_HOME/imgbuild, else
~/.cache/imgbuild (docs/configuration.md lists what is in it). Standard library only: a build that finds nothing
to do reads its receipt from here before anything else is imported (builder/receipt.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from imgbuild.errors import ConfigError


def cache_dir() -> Path:
    if os.environ.get("IMGBUILD_CACHE"):
        return Path(os.environ["IMGBUILD_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "imgbuild"


def ensure_cache_dir(path: Path) -> Path:
    """Make a directory in the cache, or say which setting points at a place that cannot hold one."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(prefix=".probe-", dir=path):  # a dir under /proc exists yet refuses files
            pass
    except OSError as exc:
        setting = "IMGBUILD_CACHE" if os.environ.get("IMGBUILD_CACHE") else "XDG_CACHE_HOME (or HOME)"
        raise ConfigError(
            f"the cache directory {path} cannot be used: {exc.strerror or exc}",
            hint=f"point {setting} at a writable directory (now {cache_dir()})",
        ) from exc
    return path
