"""layerimage.py without docker: the tar as Go's archive/tar writes it, the config and manifest over a parent.

tests/docker/test_layer_image.py holds the same bytes equal to BuildKit's.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

import pytest

from imgbuild.images import layerimage
from imgbuild.images.configimage import OCI_CONFIG_TYPE, go_indent, go_json
from imgbuild.images.ocilayout import OCI_MANIFEST_TYPE

SITE = "usr/local/lib/python3.12/dist-packages"
EPOCH = 1796083200  # 2026-12-01T00:00:00Z


def members(tar: bytes) -> list[tuple[str, str, int, int, int, int, bytes | None]]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        out = []
        for m in t.getmembers():
            fh = t.extractfile(m) if m.isfile() else None
            out.append((m.name, "dir" if m.isdir() else "file", m.mode, m.uid, m.gid, m.mtime, fh and fh.read()))
        return out


# The header BuildKit (Docker 26.1.5) wrote for "usr/" in a layer on the skeleton base, field by field.
BUILDKIT_USR_HEADER = b"".join(
    [
        b"usr/".ljust(100, b"\0"),
        b"0000755\0",  # mode
        b"0000000\0" * 2,  # uid, gid
        b"00000000000\0" * 2,  # size, mtime
        b"010016\0 ",  # checksum
        b"5",  # a directory
        b"\0" * 100,  # linkname
        b"ustar\x0000",
        b"\0" * 64,  # uname, gname: empty
        b"0000000\0" * 2,  # devmajor, devminor: written as zero, where Python's tarfile leaves NULs
    ]
).ljust(512, b"\0")


def test_headers_are_go_archive_tar_ustar_and_the_tar_ends_in_two_zero_blocks() -> None:
    tar = layerimage.layer_tar({"usr/lib/a.py": b"print(1)\n"})
    assert tar is not None
    assert tar[:512] == BUILDKIT_USR_HEADER
    assert len(tar) == 512 * 4 + 1024 and tar.endswith(b"\0" * 1024)  # no padding to a 10 KiB record
    assert members(tar) == [
        ("usr", "dir", 0o755, 0, 0, 0, None),
        ("usr/lib", "dir", 0o755, 0, 0, 0, None),
        ("usr/lib/a.py", "file", 0o644, 0, 0, 0, b"print(1)\n"),
    ]


def test_entries_are_in_walk_order_root_owned_at_mtime_zero() -> None:
    tar = layerimage.layer_tar({"a/b.py": b"x", "a/b/c.py": b"yy", "a/ab.py": b""})
    assert tar is not None
    got = members(tar)
    # a directory's own entries come before its next sibling: "a/b/c.py" before "a/b.py" ('.' < '/' as strings)
    assert [g[0] for g in got] == ["a", "a/ab.py", "a/b", "a/b/c.py", "a/b.py"]
    assert {(g[1], g[2]) for g in got} == {("dir", 0o755), ("file", 0o644)}
    assert {g[3:6] for g in got} == {(0, 0, 0)}
    assert dict((g[0], g[6]) for g in got if g[1] == "file") == {"a/ab.py": b"", "a/b/c.py": b"yy", "a/b.py": b"x"}


def test_a_long_path_is_split_into_prefix_and_name_as_go_splits_it() -> None:
    deep = "/".join(["d" * 40] * 3)  # 122 characters of directories
    path = f"{deep}/module.py"
    tar = layerimage.layer_tar({path: b"z"})
    assert tar is not None
    header = tar[-1024 - 512 - 512 : -1024 - 512]  # the file's header, before its one data block
    assert header[:100].rstrip(b"\0") == b"module.py" and header[345:500].rstrip(b"\0") == deep.encode()
    assert members(tar)[-1][0] == path


@pytest.mark.parametrize(
    "path",
    [
        "a/" + "n" * 101 + ".py",  # a last component over 100 bytes
        "d" * 160 + "/m.py",  # a directory over the 155 bytes of the prefix
        "vllm/modèle.py",  # not ASCII: Go writes a PAX header
    ],
    ids=["long-name", "long-prefix", "non-ascii"],
)
def test_a_path_beyond_ustar_returns_none_so_buildkit_builds_the_layer(path: str) -> None:
    assert layerimage.layer_tar({path: b""}) is None


@pytest.mark.parametrize("path", ["/abs/x.py", "a/../x.py", ""])
def test_a_path_outside_the_image_root_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="bad layer path"):
        layerimage.layer_tar({path: b""})


def parent() -> tuple[bytes, bytes]:
    """A parent image as BuildKit writes one: Go's JSON, keys sorted at the top, the config in struct order."""
    config = {
        "architecture": "arm64",
        "config": {"Env": ["PATH=/usr/bin"], "Entrypoint": ["vllm", "serve"], "Labels": {"b": "2"}},
        "created": "1970-01-01T00:00:00Z",
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "base"}],
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]},
    }
    config_bytes = go_json(config).encode()
    config_desc = {"mediaType": OCI_CONFIG_TYPE, "digest": "sha256:" + hashlib.sha256(config_bytes).hexdigest()}
    base_layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + "1" * 64, "size": 10}
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_TYPE,
        "config": {**config_desc, "size": len(config_bytes)},
        "layers": [{**base_layer, "annotations": {"x": "y"}}],  # inherited annotations are dropped
    }
    return go_indent(manifest), config_bytes


COPY = f"COPY vllm/ /{SITE}/vllm/"


def test_the_layer_image_stacks_one_layer_and_buildkits_history_on_the_parent() -> None:
    manifest, config = parent()
    files = {f"{SITE}/vllm/a.py": b"print('a')\n"}
    image = layerimage.layer_image(manifest, config, files, COPY, {"imgbuild.layer": "d1"}, EPOCH)
    assert image is not None
    tar = gzip.decompress(image.layer.data)
    assert tar == layerimage.layer_tar(files) and image.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    body = json.loads(image.manifest.data)
    assert body["config"] == image.config.descriptor()
    assert body["layers"][0] == {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + "1" * 64,
                                 "size": 10}  # fmt: skip
    assert body["layers"][1] == {**image.layer.descriptor(), "mediaType": layerimage.LAYER_TYPE}
    cfg = json.loads(image.config.data)
    assert cfg["rootfs"]["diff_ids"] == ["sha256:" + "1" * 64, image.diff_id]
    assert cfg["config"]["Labels"] == {"b": "2", "imgbuild.layer": "d1"}
    assert cfg["config"]["Entrypoint"] == ["vllm", "serve"]  # a layer image keeps what the parent sets
    assert cfg["created"] == "2026-12-01T00:00:00Z"
    assert cfg["history"][1:] == [
        {"created": "2026-12-01T00:00:00Z", "created_by": f"{COPY} # buildkit", "comment": "buildkit.dockerfile.v0"},
        {"created": "2026-12-01T00:00:00Z", "created_by": "LABEL imgbuild.layer=d1",
         "comment": "buildkit.dockerfile.v0", "empty_layer": True},
    ]  # fmt: skip
    again = layerimage.layer_image(manifest, config, dict(files), COPY, {"imgbuild.layer": "d1"}, EPOCH)
    assert again == image  # equal inputs, equal bytes


def test_a_parent_not_in_the_known_shape_returns_none() -> None:
    manifest, config = parent()
    files = {f"{SITE}/vllm/a.py": b""}
    labels = {"imgbuild.layer": "d1"}
    pretty = json.dumps(json.loads(config), indent=2).encode()  # not Go's bytes: writing it back would differ
    assert layerimage.layer_image(manifest, pretty, files, COPY, labels, EPOCH) is None
    docker_v2 = manifest.replace(OCI_MANIFEST_TYPE.encode(), b"application/vnd.docker.distribution.manifest.v2+json")
    assert layerimage.layer_image(docker_v2, config, files, COPY, labels, EPOCH) is None
    assert layerimage.layer_image(manifest, config, files, COPY, {"k": "line\nbreak"}, EPOCH) is None
    assert layerimage.layer_image(manifest, config, {"a/" + "n" * 101: b""}, COPY, labels, EPOCH) is None
