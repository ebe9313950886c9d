"""The wheel source: a release wheel committed into the cache as a git commit."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from imgbuild.config.models import UpstreamPin
from imgbuild.errors import UpstreamError
from imgbuild.upstream.mirror import Mirror


def make_wheel(path: Path, files: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pin_for(wheel: Path, sha: str, commit: str = "0" * 40) -> UpstreamPin:
    return UpstreamPin.model_validate(
        {
            "tag": "v1.0.0",
            "commit": commit,
            "source": {
                "kind": "wheel",
                "project": "vllm",
                "version": "1.0.0",
                "filename": wheel.name,
                "sha256": sha,
                "url": wheel.as_uri(),
            },
        }
    )


FILES = {
    "vllm/__init__.py": b"x = 1\n",
    "vllm/models/m.py": b"def f():\n    return 1\n",
    "vllm/_C.abi3.so": b"\x7fELF\0\0binary",
    "vllm-1.0.0.dist-info/METADATA": b"Name: vllm\n",
}


def test_commit_is_reproducible_and_text_only(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-1.0.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    sha = make_wheel(wheel, FILES)
    pin = pin_for(wheel, sha)
    first = Mirror(pin.source, "vllm", tmp_path / "c1").resolve(pin.tag)
    second = Mirror(pin.source, "vllm", tmp_path / "c2").resolve(pin.tag)
    assert first.commit == second.commit
    files = first.repo.run("ls-tree", "-r", "--name-only", first.commit).split()
    assert files == ["vllm/__init__.py", "vllm/models/m.py"]  # no binaries, nothing outside vllm/

    pinned = pin_for(wheel, sha, first.commit)
    assert Mirror(pinned.source, "vllm", tmp_path / "c1").resolve_pin(pinned).commit == first.commit


def test_binaries_are_told_from_their_first_block_and_late_nul_bytes_still_count(tmp_path: Path) -> None:
    big_text = b"".join(b"line %d of a long module\n" % i for i in range(20000))  # several first blocks long
    files = {
        "vllm/big.py": big_text,
        "vllm/late_nul.dat": b"a" * 200_000 + b"\0tail",  # a NUL past the first block: still a binary
        "vllm/_big.abi3.so": b"\x7fELF\2\1\1\0" + bytes(8 << 20),  # never inflated past its first block
        "vllm/ok.py": b"y = 2\n",
    }
    wheel = tmp_path / "vllm-1.0.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    pin = pin_for(wheel, make_wheel(wheel, files))
    got = Mirror(pin.source, "vllm", tmp_path / "c").resolve(pin.tag)
    assert got.repo.run("ls-tree", "-r", "--name-only", got.commit).split() == ["vllm/big.py", "vllm/ok.py"]
    assert got.repo.read_blob(got.repo.run("rev-parse", f"{got.commit}:vllm/big.py").strip()) == big_text


def test_wheel_sha256_mismatch_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-1.0.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    make_wheel(wheel, FILES)
    pin = pin_for(wheel, "f" * 64)
    with pytest.raises(UpstreamError, match="does not match the pinned") as err:
        Mirror(pin.source, "vllm", tmp_path / "c").resolve(pin.tag)
    assert err.value.hint and "deliberately" in err.value.hint


def test_pin_mismatch_after_materializing(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-1.0.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    pin = pin_for(wheel, make_wheel(wheel, FILES), "a" * 40)
    with pytest.raises(UpstreamError, match="pins " + "a" * 40):
        Mirror(pin.source, "vllm", tmp_path / "c").resolve_pin(pin)


def test_a_cached_wheel_is_hashed_once_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`plan` reads the pins' requirements every run: the wheel's sha256 and its METADATA are read once and kept
    beside it, and a wheel replaced in the cache (another size, mtime or inode) is checked again, and refused."""
    from imgbuild.upstream import mirror

    root = tmp_path / "c"
    wheel = root / "wheels" / "vllm-1.0.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    wheel.parent.mkdir(parents=True)
    files = {**FILES, "vllm-1.0.0.dist-info/METADATA": b"Name: vllm\nRequires-Dist: torch==2.14.0\n"}
    pin = pin_for(wheel, make_wheel(wheel, files))
    source = pin.source.model_copy(update={"url": None})  # in the cache, as pip put it there
    hashed: list[Path] = []
    real = mirror.sha256_file
    monkeypatch.setattr(mirror, "sha256_file", lambda p: hashed.append(p) or real(p))

    assert Mirror(source, "vllm", root).requires("1.0.0") == ("torch==2.14.0",)
    assert Mirror(source, "vllm", root).requires("1.0.0") == ("torch==2.14.0",)
    assert hashed == [wheel]
    assert (wheel.parent / (wheel.name + ".checked.json")).is_file()

    make_wheel(wheel, {**files, "vllm/extra.py": b"z = 3\n"})  # replaced: another file under the same name
    with pytest.raises(UpstreamError, match="does not match the pinned"):
        Mirror(source, "vllm", root).requires("1.0.0")
    assert hashed == [wheel, wheel]
