"""An installed distribution made back into a wheel (builder/base_wheel.py): checked against its RECORD, the same
bytes every time, and a wheel pip installs."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from imgbuild.builder.base_wheel import record_hash, wheel_from_installed
from imgbuild.errors import UpstreamError

DIST = "demo_pkg-1.2.3.dist-info"


def installed() -> dict[str, tuple[bytes, int]]:
    files = {
        "demo_pkg/__init__.py": (b"VERSION = '1.2.3'\n", 0o644),
        "demo_pkg/data/kernel.cubin": (b"\x7fELF\0binary", 0o644),
        "demo_pkg/tool.sh": (b"#!/bin/sh\necho hi\n", 0o755),
        "demo_top.py": (b"x = 1\n", 0o644),
        f"{DIST}/METADATA": (b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.2.3\n", 0o644),
        f"{DIST}/WHEEL": (b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n", 0o644),
        f"{DIST}/INSTALLER": (b"uv\n", 0o644),
    }
    rows = [f"{p},{record_hash(d)},{len(d)}" for p, (d, _) in files.items() if not p.endswith("INSTALLER")]
    rows += [f"{DIST}/INSTALLER,,", "demo_pkg/__pycache__/__init__.cpython-312.pyc,,", "../../bin/demo,sha256=x,1"]
    files[f"{DIST}/RECORD"] = ("\n".join([*rows, f"{DIST}/RECORD,,"]) + "\n").encode(), 0o644
    return files


def test_the_wheel_holds_the_recorded_files_in_the_same_bytes_every_time_and_pip_installs_it(tmp_path: Path) -> None:
    data, tag = wheel_from_installed(installed(), DIST, "base b:1")
    assert tag == "py3-none-any" and wheel_from_installed(installed(), DIST, "base b:1")[0] == data
    wheel = tmp_path / "demo_pkg-1.2.3-py3-none-any.whl"
    wheel.write_bytes(data)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert names[-1] == f"{DIST}/RECORD" and f"{DIST}/INSTALLER" not in names  # the installer's own file
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert zf.getinfo("demo_pkg/tool.sh").external_attr >> 16 & 0o777 == 0o755
        assert zf.read("demo_pkg/data/kernel.cubin") == b"\x7fELF\0binary"
    target = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (target / "demo_pkg" / "__init__.py").read_bytes() == b"VERSION = '1.2.3'\n"
    assert (target / "demo_top.py").is_file() and (target / DIST / "METADATA").is_file()


def test_a_file_changed_after_the_install_is_refused_naming_it() -> None:
    files = installed()
    files["demo_pkg/__init__.py"] = (b"VERSION = 'patched by hand'\n", 0o644)
    del files["demo_top.py"]
    with pytest.raises(UpstreamError) as info:
        wheel_from_installed(files, DIST, "base b:1")
    message = info.value.message
    assert message.startswith(f"base b:1: the installed files are not what {DIST}/RECORD says")
    assert "demo_pkg/__init__.py: not the file RECORD lists" in message
    assert "demo_top.py: listed in RECORD, missing from the base" in message
