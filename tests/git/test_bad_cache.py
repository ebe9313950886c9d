"""A damaged, odd or outdated cache: detected, set aside and rebuilt, or refused with the fix.

Every case corrupts a real mirror on disk the way a crash or a full disk would,
and runs the real command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from imgbuild.upstream.git import blob_id
from imgbuild.upstream.mirror import Mirror
from tests.git.test_wheel_source import make_wheel, pin_for
from tests.support.runner import imgbuild_here as imgbuild  # in-process: these test the command, not the process
from tests.support.synth import header

OLD = b"def f():\n    return 1\n"
NEW = b"def f():\n    return 2\n"
FILES = {"vllm/__init__.py": b"x = 1\n", "vllm/models/m.py": OLD, "vllm/models/n.py": b"n = 1\n"}


def run(root: Path, cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return imgbuild(root, *args, IMGBUILD_CACHE=str(cache), **env)


def wheel_project(tmp_path: Path) -> Path:
    """A project pinned to a local release wheel, with one patch."""
    wheel = tmp_path / "wheels" / "vllm-1.0.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    wheel.parent.mkdir()
    pin = pin_for(wheel, make_wheel(wheel, FILES))
    commit = Mirror(pin.source, "vllm", tmp_path / "probe").resolve(pin.tag).commit
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "images").mkdir()
    data = pin.model_dump(by_alias=True, exclude_none=True) | {"commit": commit}
    (root / "patches" / "upstream.yaml").write_text(yaml.safe_dump(data))
    diff = (
        "diff --git a/vllm/models/m.py b/vllm/models/m.py\n"
        f"index {blob_id(OLD)}..{blob_id(NEW)} 100644\n"
        "--- a/vllm/models/m.py\n+++ b/vllm/models/m.py\n"
        "@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
    )
    (root / "patches" / "0001-m.patch").write_text(header("return 2", "x") + diff)
    (root / "patches" / "series").write_text("0001-m.patch\n")
    (root / "images" / "latest.yaml").write_text("name: latest\n")
    return root


def mirror_of(cache: Path) -> Path:
    (path,) = (cache / "mirrors").glob("*.git")
    return path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def _loose_object_deleted(m: Path) -> None:
    assert not list((m / "objects" / "pack").glob("*.pack"))  # a small import stays loose
    sha = blob_id(OLD)
    (m / "objects" / sha[:2] / sha[2:]).unlink()


def _loose_ref_truncated(m: Path) -> None:
    ref = m / "refs" / "tags" / "v1.0.0"
    assert ref.is_file()
    ref.write_bytes(b"")


def _packed_refs_truncated(m: Path) -> None:
    git(m, "pack-refs", "--all")
    packed = m / "packed-refs"
    packed.write_bytes(packed.read_bytes()[:20])


def _pack_truncated(m: Path) -> None:
    git(m, "repack", "-a", "-d", "-q")  # as a real release's import is: one pack
    (pack,) = (m / "objects" / "pack").glob("*.pack")
    os.truncate(pack, pack.stat().st_size // 2)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A wheel project whose cache a first `patches check` filled; tests damage copies of it."""
    tmp = tmp_path_factory.mktemp("checked")
    root, cache = wheel_project(tmp), tmp / "cache"
    assert run(root, cache, "patches", "check").returncode == 0
    return root, cache


def copy_of(checked: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """The project and its filled cache, copied (the pin still names the module's wheel, which no test touches)."""
    root, cache = checked
    shutil.copytree(root, tmp_path / "proj", symlinks=True)
    shutil.copytree(cache, tmp_path / "cache", symlinks=True)
    return tmp_path / "proj", tmp_path / "cache"


@pytest.mark.parametrize(
    "damage", [_loose_object_deleted, _loose_ref_truncated, _packed_refs_truncated, _pack_truncated]
)
def test_a_broken_mirror_is_set_aside_and_rebuilt_from_the_cached_wheel(
    tmp_path: Path, checked: tuple[Path, Path], damage: object
) -> None:
    root, cache = copy_of(checked, tmp_path)
    assert callable(damage)
    damage(mirror_of(cache))
    out = run(root, cache, "patches", "apply", "--into", str(tmp_path / "out"), PIP_NO_INDEX="1")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "is broken" in out.stderr and "set aside" in out.stderr
    assert (tmp_path / "out" / "vllm" / "models" / "m.py").read_bytes() == NEW
    assert len(list((cache / "mirrors").glob("*.git.broken-*"))) == 1  # kept for a post-mortem, not deleted
    again = run(root, cache, "patches", "check", PIP_NO_INDEX="1")  # the next command works, quietly
    assert again.returncode == 0 and "broken" not in again.stderr, again.stderr


def test_a_broken_mirror_without_wheel_or_network_names_the_cache(tmp_path: Path) -> None:
    root, cache = wheel_project(tmp_path), tmp_path / "cache"
    assert run(root, cache, "patches", "check").returncode == 0
    _pack_truncated(mirror_of(cache))
    for wheel in (tmp_path / "wheels").iterdir():
        wheel.unlink()
    out = run(root, cache, "patches", "check", PIP_NO_INDEX="1")  # pip may not reach an index
    assert out.returncode == 6 and "Traceback" not in out.stderr
    assert f"the cache mirror {cache}/mirrors/" in out.stderr and "hint:" in out.stderr


def test_pinned_sha256_must_match_the_wheel_the_cache_was_made_from(tmp_path: Path, checked: tuple[Path, Path]) -> None:
    root, cache = copy_of(checked, tmp_path)
    pin_file = root / "patches" / "upstream.yaml"
    pin = yaml.safe_load(pin_file.read_text())
    cached, other = pin["source"]["sha256"], "ab" * 32
    pin["source"]["sha256"] = other
    pin_file.write_text(yaml.safe_dump(pin))
    out = run(root, cache, "patches", "check")
    assert out.returncode == 6, out.stderr
    assert other in out.stderr and cached in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("kind", ["under /proc", "a file"])
def test_an_unusable_cache_dir_is_a_config_error(tmp_path: Path, kind: str) -> None:
    root = wheel_project(tmp_path)
    if kind == "a file":
        cache = tmp_path / "cache-file"
        cache.write_text("not a directory\n")
    else:
        cache = Path("/proc/imgbuild-cache")
    out = run(root, cache, "patches", "check")
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr and f"the cache directory {cache}" in out.stderr
    assert "IMGBUILD_CACHE" in out.stderr
