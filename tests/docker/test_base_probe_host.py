"""A new file set on a base imgbuild has read before (an edit of a patch) is compiled on this machine, by a python
exactly the base's: the bytes are those the base's own python writes in a container, so the layer and its digest
are the same either way. The skeleton's python is Debian bookworm's 3.11.2, the same as this machine's
/usr/bin/python3.11 (what CI runs on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.builder import base_probe
from imgbuild.engine import Engine
from imgbuild.plan.builds import BaseInfo
from imgbuild.platforms import Platform

pytestmark = pytest.mark.docker

SITE = "/usr/local/lib/python3.11/dist-packages"
FIRST = {"vllm/a.py": b"def f():\n    return 1\n"}
EDITED = {"vllm/a.py": b"def f():\n    return 2  # edited\n", "vllm/sub/b.py": b"X = {i: i * i for i in range(9)}\n"}


class NoContainers:
    """An engine that fails the test if the probe starts a container."""

    def run(self, *_: object, **__: object) -> None:
        raise AssertionError("the edit's bytecode was compiled in a container, not here")


def test_an_edit_compiles_here_what_the_bases_python_writes(engine: Engine, skeleton_base: str, tmp_path: Path) -> None:
    info = engine.require(skeleton_base)
    base = BaseInfo(skeleton_base, info.id, None, Platform.parse("linux/arm64"), SITE, local=True)
    kept = tmp_path / "kept"
    first = base_probe.read(engine, base, FIRST, kept)  # a container: the base's packages, its python
    assert first.python is not None and first.python.cache_tag == "cpython-311"
    here = base_probe.compile_here(first.python, SITE, EDITED, skeleton_base)
    assert here is not None, (
        f"no python {first.python.version} (magic {first.python.magic}) on this machine, the skeleton's own: "
        "install Debian bookworm's python3.11 (apt-get install python3.11) for the host path to be tested"
    )
    edited = base_probe.read(NoContainers(), base, EDITED, kept)  # type: ignore[arg-type]  # the base is known
    assert dict(edited.bytecode.files) == here and edited.packages == first.packages
    in_container = base_probe.read(engine, base, EDITED, tmp_path / "fresh")  # nothing known: the base's python
    assert dict(in_container.bytecode.files) == here  # byte for byte
