"""The bytecode a layer carries beside its files (pure): one checked-hash `.pyc` per overlaid `.py`, compiled by the
base's own python (builder/base_probe.py), at the path that python's import system looks for it.

Why: a base may carry `.pyc` files of the release (vLLM's Dockerfile sets UV_COMPILE_BYTECODE=1). Python checks a
timestamp `.pyc` by the source's mtime and size and a checked-hash one by the source's hash, but an unchecked-hash
`.pyc` not at all: overlaid on one, a patched `.py` never runs. A layer that carries the patched file's own `.pyc`
replaces the base's at that path, whatever its mode. Checked-hash holds no mtime, so equal inputs still give
equal layers; and the bytecode is a function of the base (its id is in the inputs digest) and the files (the
layer names), so it adds nothing to the inputs digest."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Bytecode:
    """One base's bytecode for the overlaid files: site-packages-relative `.py` path -> (the `.pyc`'s path,
    relative to site-packages as well, and its bytes)."""

    python: str  # the base's sys.implementation.cache_tag, e.g. cpython-312
    files: Mapping[str, tuple[str, bytes]] = field(repr=False)

    def for_files(self, paths: Iterable[str]) -> dict[str, bytes]:
        """The `.pyc` files (path relative to site-packages -> bytes) of those of `paths` that are Python modules."""
        return {self.files[p][0]: self.files[p][1] for p in paths if p in self.files}


BytecodeMap = Mapping[tuple[str, str], Bytecode]  # (base image id, site-packages) -> its bytecode


def compiled(path: str) -> bool:
    """Whether a site-packages file is a module its base's python byte-compiles on import."""
    return path.endswith(".py")
