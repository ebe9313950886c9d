"""The runtime base's lock, its resolution and install by uv (offline, on a local find-links folder), the tree
layout and run options (fast tier: no docker, no network)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from imgbuild.builder import runtime_base as rb
from imgbuild.builder import runtime_layers
from imgbuild.builder import runtime_lock as rl
from imgbuild.builder.skeleton import SITE_PACKAGES
from imgbuild.digests import sha256_file
from imgbuild.errors import ConfigError, UpstreamError
from imgbuild.platforms import Platform
from imgbuild.smoke import runtime_run
from tests.support.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
SHA = "a" * 64


AMD64, ARM64 = Platform.parse("linux/amd64"), Platform.parse("linux/arm64")


def test_shipped_locks_parse_and_pin_the_project_vllm() -> None:
    from imgbuild.project import Project

    project = Project.load(ROOT)
    for platform in (AMD64, ARM64):
        lock = rl.load_lock(ROOT, platform)
        vllm = lock.pin("vllm")
        assert vllm is not None and vllm.version == project.pin.version
        assert lock.pin("torch") is not None
        assert len({p.name for p in lock.pins}) == len(lock.pins)
    arm = rl.load_lock(ROOT, ARM64).pin("vllm")
    assert arm is not None and project.pin.source.sha256 in arm.hashes  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("vllm==0.33.0 --hash=sha256:" + SHA + "\ntorch>=2 --hash=sha256:" + SHA, ":2: not a locked requirement"),
        ("vllm==0.33.0\n", ":1: not a locked requirement"),
        ("vllm==0.33.0 --hash=sha256:abc\n", ":1: not a locked requirement"),
        (f"# c\nvllm==1 \\\n  --hash=sha256:{SHA}\nbad \\\n  --hash=sha256:{SHA}", ":4: not a locked requirement"),
        ("# c\nvllm==1 --hash=sha256:" + SHA + "\nVLLM==1 --hash=sha256:" + SHA, ":3: vllm is locked twice"),
        ("vllm==1 \\\n  --hash=sha256:" + SHA + " \\\n", ":1: the last requirement ends in a line continuation"),
        ("# only comments\n", "does not pin vllm"),
        ("torch==2 --hash=sha256:" + SHA, "does not pin vllm"),
    ],
)
def test_a_bad_lock_names_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "linux-amd64.txt"
    with pytest.raises(ConfigError) as err:
        rl.parse_lock(text, path, AMD64)
    assert str(path) in err.value.message and needle in err.value.message
    assert err.value.exit_code == 3 and "--relock --platform linux/amd64" in (err.value.hint or "")


def test_uv_output_parses_with_every_hash_and_its_digest_is_the_text(tmp_path: Path) -> None:
    lines = ["# h", "Torch==2.14.0 \\", f"  --hash=sha256:{SHA} \\", f"  --hash=sha256:{'b' * 64}", "vllm==0.33.0 \\"]
    text = "\n".join([*lines, f"  --hash=sha256:{SHA}", ""])
    lock = rl.parse_lock(text, tmp_path / "x.txt", AMD64)
    assert lock.pins == (rl.Pin("torch", "2.14.0", (SHA, "b" * 64)), rl.Pin("vllm", "0.33.0", (SHA,)))
    assert lock.digest() == hashlib.sha256(text.encode()).hexdigest()
    assert rl.parse_lock(text + "\n", tmp_path / "x.txt", AMD64).digest() != lock.digest()


def test_missing_lock(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no runtime lock for linux/amd64"):
        rl.load_lock(tmp_path, AMD64)


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """uv offline, with an empty cache, on a find-links folder: vllm 1.0 needs one package per machine."""
    links = tmp_path / "links"
    links.mkdir()
    wheel(links, "vllm", ["armonly; platform_machine == 'aarch64'", "xonly; platform_machine == 'x86_64'", "common"])
    for name in ("armonly", "xonly", "common"):
        wheel(links, name, [])
    wheel(links, "common", [], version="2.0")
    for key, value in {"UV_OFFLINE": "1", "UV_FIND_LINKS": str(links), "UV_CACHE_DIR": str(tmp_path / "uv")}.items():
        monkeypatch.setenv(key, value)
    return links


def test_relock_resolves_markers_for_the_target_not_the_host(tmp_path: Path, local_index: Path) -> None:
    root = tmp_path / "project"
    arm, amd = rb.relock(root, ARM64, "1.0"), rb.relock(root, AMD64, "1.0")
    assert [p.name for p in arm.pins] == ["armonly", "common", "vllm"]
    assert [p.name for p in amd.pins] == ["common", "vllm", "xonly"]
    vllm = arm.pin("vllm")
    assert vllm is not None and vllm.hashes == (sha256_file(local_index / "vllm-1.0-py3-none-any.whl"),)
    written = root / rl.LOCK_DIR / "linux-arm64.txt"
    assert written.read_text().startswith(rl.header(ARM64)) and rl.load_lock(root, ARM64) == arm
    assert [p.version for p in arm.pins if p.name == "common"] == ["2.0"]
    (root / rl.LOCK_DIR / "constraints.txt").write_text("# why\ncommon<2\n")
    assert [p.version for p in rb.relock(root, ARM64, "1.0").pins if p.name == "common"] == ["1.0"]


def test_relock_passes_the_overrides_to_uv(tmp_path: Path, local_index: Path) -> None:
    """vllm 1.1 requires common==1.5, which the index lacks: uv alone finds no solution; with the override of
    patches/upstream.yaml (`common==2.0`, uv's --override) the lock has common 2.0, and its header says why."""
    wheel(local_index, "vllm", ["common==1.5"], version="1.1")
    root = tmp_path / "project"
    with pytest.raises(UpstreamError, match="uv resolve for linux/arm64 failed"):
        rb.relock(root, ARM64, "1.1")
    lock = rb.relock(root, ARM64, "1.1", overrides=["common==2.0"])
    assert [(p.name, p.version) for p in lock.pins] == [("common", "2.0"), ("vllm", "1.1")]
    assert "# uv --override common==2.0 (an override in patches/upstream.yaml)\n" in lock.text
    assert lock.text.startswith(rl.header(ARM64, ["common==2.0"]))


@pytest.mark.usefixtures("local_index")
def test_install_tree_installs_the_lock_and_refuses_a_wrong_hash(tmp_path: Path) -> None:
    lock = rb.relock(tmp_path / "project", ARM64, "1.0")
    (tmp_path / "ok").mkdir()
    rb.install_tree(lock, tmp_path / "ok" / "tree")
    assert sorted(p.name for p in (tmp_path / "ok" / "tree").iterdir() if not p.name.endswith(".dist-info")) == [
        "armonly", "common", "vllm"
    ]  # fmt: skip
    bad = rl.parse_lock(lock.text.replace(lock.pins[0].hashes[0], SHA), tmp_path / "bad.txt", ARM64)
    (tmp_path / "bad").mkdir()
    with pytest.raises(UpstreamError, match="uv install for linux/arm64 failed"):
        rb.install_tree(bad, tmp_path / "bad" / "tree")


def test_shebangs_point_at_the_image_python(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_bytes(b"#!/root/.pyenv/versions/3.11.7/bin/python3.11\nimport sys\n")
    (bin_dir / "tool.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    assert rb.fix_shebangs(bin_dir) == ["vllm"]
    assert (bin_dir / "vllm").read_bytes() == b"#!/usr/bin/python3\nimport sys\n"
    assert (bin_dir / "tool.sh").read_bytes().startswith(b"#!/bin/sh")


def rootfs_tar(path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("./etc/os-release")
        info.size, info.mtime = 3, 1_700_000_000
        tar.addfile(info, io.BytesIO(b"bk\n"))
    return path


def layered(lock: rl.RuntimeLock, where: Path, layout: Path) -> rb.Layered:
    where.mkdir(parents=True)
    rb.install_tree(lock, where / "tree")
    rootfs = layout.parent / "rootfs.tar"  # the cached rootfs: one file
    rootfs = rootfs if rootfs.exists() else rootfs_tar(rootfs)
    return rb.write_layers(
        where / "tree", rootfs, layout, platform=ARM64, site_packages=SITE_PACKAGES, pins=rb.pin_keys(lock),
        extra={"etc/x.pth": b"x"},
    )  # fmt: skip


@pytest.mark.usefixtures("local_index")
def test_two_locks_that_share_a_wheel_share_its_layer_and_the_cache_writes_it_once(tmp_path: Path) -> None:
    one = rb.relock(tmp_path / "p1", ARM64, "1.0")  # common 2.0
    (tmp_path / "p2" / rl.LOCK_DIR).mkdir(parents=True)
    (tmp_path / "p2" / rl.LOCK_DIR / "constraints.txt").write_text("common<2\n")
    two = rb.relock(tmp_path / "p2", ARM64, "1.0")  # common 1.0
    a = layered(one, tmp_path / "a", tmp_path / "layout")
    again = layered(one, tmp_path / "a2", tmp_path / "layout")
    assert again.manifest == a.manifest and again.written == ("imgbuild",)  # the same lock: the same image, no tar
    b = layered(two, tmp_path / "b", tmp_path / "layout")
    la, lb = dict(a.layers), dict(b.layers)
    assert la.keys() == lb.keys() and la["rootfs"] == lb["rootfs"]
    bucket = f"bucket-{runtime_layers.bucket_of('common'):02d}"
    differ = {name for name in la if la[name] != lb[name]}
    assert bucket in differ and differ <= {bucket, f"bucket-{runtime_layers.bucket_of('vllm'):02d}"}
    assert set(b.written) == differ | {"imgbuild"}
    # the layer tars are blobs of an OCI layout: the manifest lists them, uncompressed
    doc = json.loads((tmp_path / "layout" / "blobs" / "sha256" / b.manifest.digest[7:]).read_bytes())
    assert [lay["digest"] for lay in doc["layers"]] == [blob.digest for _, blob in b.layers]
    with tarfile.open(tmp_path / "layout" / "blobs" / "sha256" / la[bucket].digest[7:]) as tar:
        names = tar.getnames()
    assert f"{SITE_PACKAGES[1:]}/common/__init__.py" in names


def test_run_options_mount_an_aarch64_cpuinfo_only_under_emulation(tmp_path: Path) -> None:
    opts = runtime_run.runtime_run_options(ARM64, tmp_path, emulated=True)
    host, container, mode = opts.binds[0].split(":")
    assert (container, mode) == ("/proc/cpuinfo", "ro")
    assert opts.env == {"VLLM_TARGET_DEVICE": "cpu"}
    text = Path(host).read_text()
    assert text.count("processor\t:") == runtime_run.CORES and "CPU implementer\t: 0x41" in text
    native = runtime_run.runtime_run_options(ARM64, tmp_path, emulated=False)
    assert native == runtime_run.RunOptions(env={"VLLM_TARGET_DEVICE": "cpu"})
    assert runtime_run.runtime_run_options(Platform.parse("linux/amd64"), tmp_path, emulated=False) == native


def test_the_pth_makes_site_packages_a_site_dir_so_nested_pth_files_work(tmp_path: Path) -> None:
    """Wheels such as nvidia-cutlass-dsl ship a .pth; a plain path line in ours would ignore it."""
    import subprocess
    import sys

    outer, site, extra = tmp_path / "outer", tmp_path / "site", tmp_path / "extra"
    for d in (outer, site, extra):
        d.mkdir()
    (outer / "imgbuild.pth").write_bytes(rb.pth_text(str(site)))
    (site / "nested.pth").write_text(f"{extra}\n")
    (extra / "only_via_nested_pth.py").write_text("X = 42\n")
    code = f"import site; site.addsitedir({str(outer)!r}); import only_via_nested_pth as m; print(m.X)"
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "42", proc.stderr


def test_a_lost_layer_blob_is_said_with_the_way_out_and_nothing_else_is_touched() -> None:
    from imgbuild.builder.runtime_base import lost_blob_hint
    from imgbuild.errors import DockerError

    lost = DockerError("buildx build failed: failed to solve: sha256:0a1b: not found")
    said = lost_blob_hint(lost, no_cache=False)
    assert said.message == lost.message
    assert said.hint is not None and "imgbuild skeleton --runtime --force" in said.hint
    assert lost_blob_hint(lost, no_cache=True) is lost  # --force already built without the cache: nothing to add
    other = DockerError("buildx build failed: no space left on device")
    assert lost_blob_hint(other, no_cache=False) is other
    hinted = DockerError("manifest not found", hint="pull it first")
    assert lost_blob_hint(hinted, no_cache=False) is hinted
