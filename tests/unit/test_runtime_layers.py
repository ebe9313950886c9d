"""The runtime base's package layers (builder/runtime_layers.py): which file goes to which layer, and tars whose
digest is a function of the files alone (pure; no docker)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from imgbuild.builder import runtime_layers as L

MB = 1024 * 1024
SITE, BIN = "/usr/local/lib/python3.12/dist-packages", "/usr/local/bin"


def dist(name: str, size: int, *files: str, requires: tuple[str, ...] = ()) -> L.Dist:
    return L.Dist(name, "1.0", tuple(sorted(files or (f"{name}/__init__.py",))), size, frozenset(requires))


def test_large_dists_get_a_layer_and_small_ones_a_bucket_by_name() -> None:
    dists = [dist("torch", 900 * MB), dist("vllm", 300 * MB), dist("idna", 1 * MB), dist("six", 1000)]
    layers = L.split(dists, [], last=["vllm"])
    names = [lay.name for lay in layers]
    assert names[-1] == "pkg-vllm" and "pkg-torch" in names
    assert {f"bucket-{L.bucket_of('idna'):02d}", f"bucket-{L.bucket_of('six'):02d}"} <= set(names)
    by_member = {m: lay for lay in layers for m in lay.members}
    assert by_member["torch"].files == ("torch/__init__.py",) and by_member["torch"].members == ("torch",)
    assert names.index("pkg-torch") < min(i for i, n in enumerate(names) if n.startswith("bucket-"))


def test_the_largest_layers_come_first_so_a_change_puts_the_fewest_bytes_above_it() -> None:
    dists = [dist("a-small-big", 30 * MB), dist("z-huge", 900 * MB), dist("m-mid", 200 * MB), dist("vllm", 300 * MB)]
    names = [lay.name for lay in L.split(dists, [], last=["vllm"])]
    assert names == ["pkg-z-huge", "pkg-m-mid", "pkg-a-small-big", "pkg-vllm"]


def test_large_layers_come_in_dependency_order_so_a_bump_puts_only_its_dependents_above_it() -> None:
    # torch's CUDA library and a large leaf below torch, what pins torch above it, whatever the sizes
    dists = [
        dist("nvidia-cublas", 600 * MB),
        dist("leaf", 900 * MB),
        dist("torch", 800 * MB, requires=("nvidia-cublas", "not-installed")),
        dist("torchvision", 30 * MB, requires=("torch",)),
        dist("flashinfer", 400 * MB, requires=("torch", "leaf")),
        dist("vllm", 300 * MB, requires=("torch", "torchvision", "flashinfer")),
    ]
    names = [lay.name for lay in L.split(dists, [], last=["vllm"])]
    assert names == ["pkg-leaf", "pkg-nvidia-cublas", "pkg-torch", "pkg-flashinfer", "pkg-torchvision", "pkg-vllm"]
    assert L.heights(dists) == {"leaf": 0, "nvidia-cublas": 0, "torch": 1, "torchvision": 2, "flashinfer": 2, "vllm": 3}


def test_a_dependency_cycle_is_cut_not_followed_forever() -> None:
    dists = [dist("a", 1, requires=("b",)), dist("b", 1, requires=("a", "c")), dist("c", 1)]
    assert L.heights(dists) == {"c": 0, "b": 1, "a": 2}


def test_adding_or_bumping_a_package_changes_only_its_own_layer() -> None:
    smalls = [dist(f"small{i}", 1000 + i) for i in range(40)]
    before = L.split([dist("torch", 900 * MB), *smalls], [])
    added = dist("newcomer", 5000)
    bumped = L.Dist("small3", "2.0", ("small3/__init__.py", "small3/new.py"), 2000)
    after = L.split([dist("torch", 900 * MB), *[bumped if d.name == "small3" else d for d in smalls], added], [])
    changed = {lay.name for lay in after} ^ {lay.name for lay in before} | {
        a.name for a in after for b in before if a.name == b.name and a != b
    }
    assert changed <= {f"bucket-{L.bucket_of('newcomer'):02d}", f"bucket-{L.bucket_of('small3'):02d}"}
    assert changed  # and the rest are the same plans, file for file


def test_files_no_record_lists_go_to_unowned_and_a_shared_file_to_the_first_dist() -> None:
    dists = [dist("b", 10, "b/x.py", "shared.pth"), dist("a", 10, "a/x.py", "shared.pth")]
    layers = L.split(dists, ["a/x.py", "b/x.py", "shared.pth", "orphan.py"])
    by_name = {lay.name: lay for lay in layers}
    assert by_name[L.UNOWNED].files == ("orphan.py",) and layers[-1].name == L.UNOWNED
    owner_of_shared = [lay for lay in layers if "shared.pth" in lay.files]
    assert len(owner_of_shared) == 1 and "a" in owner_of_shared[0].members


def test_at_most_max_layers_the_smallest_large_dists_join_buckets() -> None:
    dists = [dist(f"big{i:03d}", (100 + i) * MB) for i in range(150)]
    layers = L.split(dists, [], max_layers=40, buckets=8)
    assert len(layers) <= 40
    alone = {lay.members[0] for lay in layers if lay.name.startswith("pkg-")}
    assert "big149" in alone and "big000" not in alone  # the largest keep their own layer
    assert sum(len(lay.members) for lay in layers) == 150


def test_read_dists_attributes_files_by_record_and_keeps_scripts(tmp_path: Path) -> None:
    info = tmp_path / "my_pkg-2.0.dist-info"
    info.mkdir()
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("x = 1\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tool").write_text("#!/usr/bin/python3\n")
    (info / "RECORD").write_text("my_pkg/__init__.py,sha256=x,6\nbin/tool,,\n../../etc/escape,,\nmissing.py,,\n")
    (info / "METADATA").write_text(
        "Name: my-pkg\nRequires-Dist: Torch_Vision (>=0.1)\nRequires-Dist: numpy; python_version >= '3.9'\n"
        'Requires-Dist: pytest ; extra == "test"\n\nRequires-Dist: in-the-body\n'
    )
    (d,) = L.read_dists(tmp_path)
    assert (d.name, d.version) == ("my-pkg", "2.0")
    assert d.requires == {"torch-vision", "numpy"}  # an extra's requirement and the description's text left out
    assert d.files == ("bin/tool", "my_pkg-2.0.dist-info/METADATA", "my_pkg-2.0.dist-info/RECORD", "my_pkg/__init__.py")
    assert L.archive_name("bin/tool", SITE, BIN) == "usr/local/bin/tool"
    assert L.archive_name("my_pkg/__init__.py", SITE, BIN) == f"{SITE[1:]}/my_pkg/__init__.py"


def make_tree(root: Path, mtime: int, mode: int) -> dict[str, Path]:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "sub" / "b.py").write_text("b\n")
    (root / "pkg" / "a.so").write_bytes(b"\x7fELF")
    (root / "pkg" / "a.so").chmod(mode)
    (root / "pkg" / "link.py").symlink_to("sub/b.py")
    for p in root.rglob("*"):
        os.utime(p, (mtime, mtime), follow_symlinks=False)
    return L.tree_entries(root, ["pkg/sub/b.py", "pkg/a.so", "pkg/link.py"], SITE, BIN)


def test_a_layer_tar_is_a_function_of_the_files_alone(tmp_path: Path) -> None:
    one = make_tree(tmp_path / "one", 1_700_000_000, 0o775)
    two = make_tree(tmp_path / "two", 12345, 0o700)  # other mtimes, another exec mode, another folder
    sink = io.BytesIO()
    digest, size = L.write_tar(one, sink)
    assert L.write_tar(dict(reversed(list(two.items()))), None) == (digest, size) == (digest, len(sink.getvalue()))
    with tarfile.open(fileobj=io.BytesIO(sink.getvalue())) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[:2] == ["usr", "usr/local"] and names == sorted(names, key=lambda n: n.split("/"))
    assert all((m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "") for m in members)
    modes = {m.name.rsplit("/", 1)[-1]: (m.type, m.mode) for m in members}
    assert modes["a.so"] == (tarfile.REGTYPE, 0o755) and modes["b.py"] == (tarfile.REGTYPE, 0o644)
    assert modes["link.py"][0] == tarfile.SYMTYPE and modes["sub"] == (tarfile.DIRTYPE, 0o755)


def test_the_rootfs_is_rewritten_without_dates_devices_or_dot_slash() -> None:
    src = io.BytesIO()
    with tarfile.open(fileobj=src, mode="w") as tar:
        for name, kind in [("./", tarfile.DIRTYPE), ("./dev/null", tarfile.CHRTYPE), ("./usr/bin/su", tarfile.REGTYPE)]:
            info = tarfile.TarInfo(name)
            info.type, info.mtime, info.mode, info.uname = kind, 1_700_000_000, 0o4755, "root"
            data = b"su" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    digest, _ = L.rewrite_rootfs(io.BytesIO(src.getvalue()), out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        members = tar.getmembers()
    assert [(m.name, m.mode, m.mtime, m.uname) for m in members] == [("usr/bin/su", 0o4755, 0, "")]
    assert digest == L.rewrite_rootfs(io.BytesIO(src.getvalue()), None)[0]


def test_the_layout_manifest_lists_uncompressed_layers_whose_digest_is_the_diff_id() -> None:
    blobs = [L.Blob("sha256:" + "a" * 64, 10), L.Blob("sha256:" + "b" * 64, 20)]
    config = L.image_config("arm64", "v8", [("rootfs", blobs[0]), ("pkg-torch", blobs[1])])
    assert config["rootfs"] == {"type": "layers", "diff_ids": [b.digest for b in blobs]}
    assert config["created"] == L.EPOCH and config["variant"] == "v8"
    assert [h["created_by"] for h in config["history"]] == [  # type: ignore[attr-defined]
        "imgbuild runtime layer rootfs", "imgbuild runtime layer pkg-torch"
    ]  # fmt: skip
    doc = L.manifest(L.Blob("sha256:" + "c" * 64, 5), blobs, {})
    assert [lay["mediaType"] for lay in doc["layers"]] == [L.LAYER_MEDIA] * 2  # type: ignore[index]


def test_a_modules_bytecode_goes_to_its_modules_layer_not_unowned() -> None:
    dists = [dist("torch", 900 * MB, "torch/__init__.py", "torch/nn/mod.py"), dist("six", 1000, "six.py")]
    pyc = ["torch/__pycache__/__init__.cpython-311.pyc", "torch/nn/__pycache__/mod.cpython-311.pyc"]
    stray = ["other/__pycache__/gone.cpython-311.pyc", "__pycache__/six.cpython-311.pyc"]
    layers = {lay.name: lay for lay in L.split(dists, [*pyc, *stray])}
    assert set(pyc) <= set(layers["pkg-torch"].files)
    assert "__pycache__/six.cpython-311.pyc" in layers[f"bucket-{L.bucket_of('six'):02d}"].files  # top-level module
    assert layers[L.UNOWNED].files == ("other/__pycache__/gone.cpython-311.pyc",)  # its module is no dist's


def test_source_of_names_the_module_only_for_bytecode_in_pycache() -> None:
    assert L.source_of("a/b/__pycache__/m.cpython-311.pyc") == "a/b/m.py"
    assert L.source_of("a/__pycache__/m.cpython-311.opt-1.pyc") == "a/m.py"
    assert L.source_of("a/m.pyc") is None and L.source_of("a/__pycache__/m.py") is None
    assert L.source_of("a/__pycache__/notes.txt") is None
