"""The runtime base's lock, exclusions, tree layout and run options (fast tier: no docker, no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.builder import runtime_base as rb
from imgbuild.builder import runtime_lock as rl
from imgbuild.errors import ConfigError
from imgbuild.platforms import Platform
from imgbuild.smoke import runtime_run

ROOT = Path(__file__).resolve().parents[2]
SHA = "a" * 64


def item(name: str, version: str, requires: list[str], sha: str = SHA) -> dict[str, object]:
    return {
        "metadata": {"name": name, "version": version, "requires_dist": requires},
        "download_info": {"url": f"https://example.invalid/{name}.whl", "archive_info": {"hashes": {"sha256": sha}}},
    }


def report(*items: dict[str, object]) -> dict[str, object]:
    return {"version": "1", "install": list(items)}


ARM64 = Platform.parse("linux/arm64")


def test_shipped_locks_parse_and_pin_the_project_vllm() -> None:
    from imgbuild.project import Project

    project = Project.load(ROOT)
    for platform in rl.MACHINES:
        lock = rl.load_lock(ROOT, platform)
        vllm = lock.pin("vllm")
        assert vllm is not None and vllm.version == project.pin.version
        assert lock.pin("torch") is not None
        assert len({p.name for p in lock.pins}) == len(lock.pins)
    arm = rl.load_lock(ROOT, "linux/arm64").pin("vllm")
    assert arm is not None and arm.sha256 == project.pin.source.sha256  # type: ignore[union-attr]
    rl.load_exclusions(ROOT)  # the shipped exclusions file is valid


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("vllm==0.33.0 --hash=sha256:" + SHA + "\ntorch>=2 --hash=sha256:" + SHA, ":2: not a locked requirement"),
        ("vllm==0.33.0\n", ":1: not a locked requirement"),
        ("vllm==0.33.0 --hash=sha256:abc\n", ":1: not a locked requirement"),
        ("# c\nvllm==1 --hash=sha256:" + SHA + "\nVLLM==1 --hash=sha256:" + SHA, ":3: vllm is locked twice"),
        ("# only comments\n", "the lock is empty"),
        ("torch==2 --hash=sha256:" + SHA, "does not pin vllm"),
    ],
)
def test_a_bad_lock_names_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "linux-amd64.txt"
    with pytest.raises(ConfigError) as err:
        rl.parse_lock(text, path, "linux/amd64")
    assert str(path) in err.value.message and needle in err.value.message
    assert err.value.exit_code == 3 and "--relock" in (err.value.hint or "")


def test_missing_lock_and_unknown_platform(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no runtime lock for linux/amd64"):
        rl.load_lock(tmp_path, "linux/amd64")
    with pytest.raises(ConfigError, match="no lock for platform 'linux/s390x'"):
        rl.load_lock(tmp_path, "linux/s390x")


def test_lock_text_round_trips_and_its_digest_moves_with_it(tmp_path: Path) -> None:
    lock = rl.Lock("linux/amd64", (rl.Pin("torch", "2.14.0", SHA), rl.Pin("vllm", "0.33.0", "b" * 64)))
    again = rl.parse_lock(lock.text(), tmp_path / "x.txt", "linux/amd64")
    assert again == lock and again.digest() == lock.digest()
    other = rl.Lock("linux/amd64", (rl.Pin("torch", "2.14.1", SHA), rl.Pin("vllm", "0.33.0", "b" * 64)))
    assert other.digest() != lock.digest()


def test_markers_are_evaluated_for_the_target_not_the_host() -> None:
    rep = report(
        item("vllm", "1", ["torch==2", "xonly; platform_machine == 'x86_64'", "big[gpu]", "gpuonly"]),
        item("torch", "2", ["setuptools; python_version > '3.11'", "typing-extensions"]),
        item("xonly", "1", []),
        item("big", "1", ["extra-dep; extra == 'gpu'", "not-asked; extra == 'other'"]),
        item("extra-dep", "1", []),
        item("not-asked", "1", []),
        item("typing_extensions", "4", []),
        item("setuptools", "80", []),
        item("gpuonly", "1", ["cuda-thing"]),
        item("cuda-thing", "1", []),
    )
    excl = (rl.Exclusion("gpuonly", ("linux/arm64",), "GPU only"),)
    amd = {p.name for p in rl.lock_from_report(rep, "linux/amd64", excl).pins}
    arm = {p.name for p in rl.lock_from_report(rep, "linux/arm64", excl).pins}
    assert amd == {"vllm", "torch", "xonly", "big", "extra-dep", "typing-extensions", "gpuonly", "cuda-thing"}
    assert arm == {"vllm", "torch", "big", "extra-dep", "typing-extensions"}


def test_a_requirement_pip_did_not_resolve_is_named() -> None:
    rep = report(item("vllm", "1", ["armonly; platform_machine == 'aarch64'"]))
    assert rl.lock_from_report(rep, "linux/amd64", ()).pins == (rl.Pin("vllm", "1", SHA),)
    with pytest.raises(ConfigError, match=r"vllm needs armonly.*on linux/arm64"):
        rl.lock_from_report(rep, "linux/arm64", ())


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a: [\n", "invalid YAML: unclosed flow collection"),
        ("- a\n", "expected a mapping"),
        ("foo:\n  platforms: [linux/amd64]\n", "exactly the keys platforms and reason"),
        ("foo:\n  platforms: [linux/ppc]\n  reason: x\n", "platforms must be a list"),
        ("ok:\n  platforms: [linux/amd64]\n  reason: y\nfoo:\n  platforms: [linux/amd64]\n  reason: ''\n", ":4: foo"),
    ],
)
def test_bad_exclusions_name_the_file(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "exclude.yaml"
    with pytest.raises(ConfigError) as err:
        rl.parse_exclusions(text, path)
    assert str(path) in err.value.message and needle in err.value.message


def test_platform_tags_cover_older_manylinux() -> None:
    tags = rl.platform_tags("linux/arm64")
    assert tags[0] == "manylinux_2_36_aarch64" and "manylinux_2_17_aarch64" in tags and "manylinux2014_aarch64" in tags
    assert "manylinux1_x86_64" in rl.platform_tags("linux/amd64")


def test_shebangs_point_at_the_image_python(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_bytes(b"#!/root/.pyenv/versions/3.11.7/bin/python3.11\nimport sys\n")
    (bin_dir / "tool.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    assert rb.fix_shebangs(bin_dir) == ["vllm"]
    assert (bin_dir / "vllm").read_bytes() == b"#!/usr/bin/python3\nimport sys\n"
    assert (bin_dir / "tool.sh").read_bytes().startswith(b"#!/bin/sh")


def test_the_build_context_puts_packages_in_site_and_scripts_in_usr_local_bin(tmp_path: Path) -> None:
    tree = tmp_path / "build" / "tree"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("x = 1\n")
    (tree / "bin").mkdir()
    (tree / "bin" / "vllm").write_text("#!/usr/bin/python3\n")
    (tree / "vllm" / "link.py").symlink_to("__init__.py")
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(b"rootfs")
    site = "/usr/local/lib/python3.12/dist-packages"
    context = rb.build_context(tree, rootfs, site, {rb.LABEL: "k"})
    assert sorted(p.name for p in context.iterdir()) == ["Dockerfile", "bin", "rootfs.tar", "site.pth", "tree"]
    assert (context / "bin" / "vllm").is_file() and not (tree / "bin").exists()
    assert (context / "site.pth").read_bytes() == rb.pth_text(site) and (
        context / "rootfs.tar"
    ).read_bytes() == b"rootfs"
    text = (context / "Dockerfile").read_text()
    for line in ("FROM scratch", "ADD rootfs.tar /", f"COPY tree/ {site}/", "COPY bin/ /usr/local/bin/",
                 "COPY site.pth /usr/lib/python3/dist-packages/imgbuild-skeleton-vllm.pth", 'imgbuild.runtime-base="k"',
                 'ENTRYPOINT ["vllm", "serve"]'):  # fmt: skip
        assert line in text, line
    every = [p for p in context.rglob("*")]
    assert every and all(p.lstat().st_mtime == 0 for p in every)  # equal trees give equal layers
    assert (tree / "vllm" / "link.py").is_symlink()


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
