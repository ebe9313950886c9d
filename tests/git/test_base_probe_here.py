"""Bytecode of a new file set compiled on this machine (builder/base_probe.py `compile_here`): only by a python that
is exactly the base's, else nothing (the build then asks the base's python in a container)."""

from __future__ import annotations

import importlib.util
import platform
import py_compile
import sys
from pathlib import Path

from imgbuild.builder.base_probe import Python, compile_here

SITE = "/usr/local/lib/python3.99/dist-packages"
FILES = {"vllm/a.py": b"def f():\n    return 1\n", "vllm/sub/b.py": b"X = [i * 2 for i in range(3)]\n"}


def this_python() -> Python:
    return Python(sys.implementation.cache_tag, platform.python_version(), importlib.util.MAGIC_NUMBER.hex())


def test_a_python_exactly_the_bases_compiles_what_the_base_would(tmp_path: Path) -> None:
    got = compile_here(this_python(), SITE, FILES, "base:1")
    assert got is not None and set(got) == set(FILES)
    for rel, (pyc_path, data) in got.items():
        tag = sys.implementation.cache_tag
        assert pyc_path == f"{rel.rpartition('/')[0]}/__pycache__/{rel.rpartition('/')[2][:-3]}.{tag}.pyc"
        src = tmp_path / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_bytes(FILES[rel])
        out = tmp_path / "out.pyc"
        py_compile.compile(str(src), cfile=str(out), dfile=f"{SITE}/{rel}", doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)  # fmt: skip
        assert data == out.read_bytes()  # checked-hash (flags 3), the image's path in the code object
        assert int.from_bytes(data[4:8], "little") == 3


def test_no_python_of_the_bases_exact_version_here_gives_nothing() -> None:
    mine = this_python()
    for other in (
        Python(mine.cache_tag, mine.version + ".9", mine.magic),  # another patch release: maybe another compiler
        Python(mine.cache_tag, mine.version, "00000000"),
        Python("cpython-399", "3.99.0", mine.magic),
    ):
        assert compile_here(other, SITE, FILES, "base:1") is None, other
