"""The runtime base's bytecode is compiled once, on the host, by a python of the base's version (not under qemu):
this shows that the arm64 base's own python3, compiling the same real modules for the same paths in checked-hash
mode, writes the same bytes, so the layers are what the base's interpreter would have made."""

from __future__ import annotations

import hashlib
import shutil
import sysconfig
from pathlib import Path

import pytest

from imgbuild.builder import runtime_bytecode as B
from imgbuild.builder import runtime_lock as rl
from imgbuild.engine import Engine

pytestmark = pytest.mark.docker

SITE = "/usr/local/lib/python3.12/dist-packages"
PACKAGES = ("json", "email", "asyncio")  # real, varied code: ~70 modules of the host's standard library
IN_IMAGE = r"""
import hashlib, os, platform, py_compile, sys
root, site = sys.argv[1], sys.argv[2]
print(platform.machine(), platform.python_version())
for dirpath, _, names in os.walk(root):
    for name in names:
        src = os.path.join(dirpath, name)
        rel = os.path.relpath(src, root)
        cfile = py_compile.compile(src, cfile="/tmp/x.pyc", dfile=f"{site}/{rel}", doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        print(rel, hashlib.sha256(open(cfile, "rb").read()).hexdigest())
"""


def test_the_hosts_bytecode_is_the_arm64_bases_own(engine: Engine, skeleton_base: str, tmp_path: Path) -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    tree = tmp_path / "tree"
    for name in PACKAGES:
        shutil.copytree(stdlib / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "tests"))
    compiler = B.find_compiler(rl.PYTHON_VERSION)
    made = B.compile_tree(tree, SITE, tmp_path / "cache", compiler)
    assert made.modules > 50 and made.refused == 0
    sources = {rel: (tree / rel).read_bytes() for rel in B.modules(tree)}
    files = {f"/src/{rel}": data for rel, data in sources.items()}
    res = engine.run(skeleton_base, ["-c", IN_IMAGE, "/src", SITE], entrypoint=["python3"], files=files)
    assert res.exit_code == 0, res.stderr
    head, *lines = res.stdout.splitlines()
    machine, version = head.split()
    assert machine == "aarch64" and version.startswith(f"{rl.PYTHON_VERSION}.")
    theirs = dict(line.split() for line in lines)
    assert theirs.keys() == sources.keys()
    ours = {
        rel: hashlib.sha256((tree / B.pyc_name(rel, compiler.cache_tag)).read_bytes()).hexdigest() for rel in sources
    }
    differ = sorted(rel for rel in sources if ours[rel] != theirs[rel])
    assert not differ, f"host python {compiler.version}, the base's {version}: {differ}"
