"""The runtime base's bytecode (builder/runtime_bytecode.py) on a small tree, with the host's python of the base's
version: checked-hash `.pyc` at the import system's path, named for the image's path, kept in the cache and taken
from it, nothing for a source that does not compile, and the same bytes on a second compile."""

from __future__ import annotations

import importlib.util
import marshal
import sys
from pathlib import Path

import pytest

from imgbuild.builder import runtime_bytecode as B
from imgbuild.builder import runtime_lock as rl
from imgbuild.errors import DockerError

SITE = "/usr/local/lib/python3.12/dist-packages"


def tree(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "pkg" / "__init__.py").write_text("X = 1\n")
    (root / "pkg" / "sub" / "mod.py").write_text("def f():\n    return 2\n")
    (root / "pkg" / "broken.py").write_text("def f(:\n")  # a template in a wheel: no bytecode, as uv leaves it
    (root / "bin" / "tool.py").write_text("print('a console script')\n")  # not a module: not compiled
    return root


@pytest.fixture
def compiler() -> B.Compiler:
    return B.find_compiler(f"{sys.version_info.major}.{sys.version_info.minor}")


def test_every_module_gets_checked_hash_bytecode_named_for_its_path_in_the_image(
    tmp_path: Path, compiler: B.Compiler
) -> None:
    root = tree(tmp_path / "tree")
    made = B.compile_tree(root, SITE, tmp_path / "cache", compiler)
    assert (made.modules, made.compiled, made.cached, made.refused) == (3, 2, 0, 1)
    pyc = root / "pkg" / "sub" / "__pycache__" / f"mod.{compiler.cache_tag}.pyc"
    data = pyc.read_bytes()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(data[4:8], "little") == 0b11  # hash-based, checked
    assert data[8:16] == importlib.util.source_hash((root / "pkg" / "sub" / "mod.py").read_bytes())
    assert marshal.loads(data[16:]).co_filename == f"{SITE}/pkg/sub/mod.py"  # the image's path, not the host's
    assert not (root / "pkg" / "__pycache__" / f"broken.{compiler.cache_tag}.pyc").exists()
    assert not (root / "bin" / "__pycache__").exists()


def test_a_second_tree_takes_the_bytecode_from_the_cache_and_a_changed_file_compiles_again(
    tmp_path: Path, compiler: B.Compiler
) -> None:
    first = tree(tmp_path / "one")
    B.compile_tree(first, SITE, tmp_path / "cache", compiler)
    second = tree(tmp_path / "two")
    (second / "pkg" / "__init__.py").write_text("X = 3\n")
    made = B.compile_tree(second, SITE, tmp_path / "cache", compiler)
    assert (made.compiled, made.cached) == (1, 2)  # the changed __init__; mod.py and broken.py's empty entry
    rel = f"pkg/sub/__pycache__/mod.{compiler.cache_tag}.pyc"
    assert (first / rel).read_bytes() == (second / rel).read_bytes()
    init = f"pkg/__pycache__/__init__.{compiler.cache_tag}.pyc"
    assert (first / init).read_bytes() != (second / init).read_bytes()


def test_compiled_again_without_the_cache_the_bytes_are_the_same(tmp_path: Path, compiler: B.Compiler) -> None:
    one, two = tree(tmp_path / "one"), tree(tmp_path / "two")
    B.compile_tree(one, SITE, tmp_path / "c1", compiler)
    B.compile_tree(two, SITE, tmp_path / "c2", compiler)
    for pyc in sorted(one.rglob("*.pyc")):
        assert pyc.read_bytes() == (two / pyc.relative_to(one)).read_bytes(), pyc


def test_no_python_of_the_bases_version_is_one_error_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(DockerError) as err:
        B.find_compiler("2.9")
    assert "no python 2.9" in err.value.message and "python2.9" in (err.value.hint or "")


def test_the_base_python_version_is_what_the_lock_resolves_for() -> None:
    assert rl.PYTHON_VERSION == "3.11"  # bookworm's python3: find_compiler(rl.PYTHON_VERSION) is asked for this


def test_the_bases_label_leaves_out_the_patch_release_the_cache_key_keeps_it(compiler: B.Compiler) -> None:
    assert compiler.label() == f"checked-hash {compiler.cache_tag} magic {importlib.util.MAGIC_NUMBER.hex()}"
    assert compiler.version not in compiler.label() and compiler.describe().endswith(f"python {compiler.version}")
