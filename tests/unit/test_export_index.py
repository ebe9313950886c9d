"""The index written over one BuildKit export per platform (docker._index_of)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from imgbuild.errors import DockerError
from imgbuild.images import configimage, docker, ocilayout


def put(layout: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    ocilayout.put_blob(layout, digest, data)
    return digest


def exported(layout: Path, arch: str) -> dict[str, object]:
    data = json.dumps({"schemaVersion": 2, "mediaType": docker.OCI_MANIFEST_TYPE, "arch": arch}).encode()
    return {"mediaType": docker.OCI_MANIFEST_TYPE, "digest": put(layout, data), "size": len(data)}


def test_the_index_names_each_platforms_manifest_in_order_and_is_stored(tmp_path: Path) -> None:
    arm, amd = exported(tmp_path, "arm64"), exported(tmp_path, "amd64")
    amd["platform"] = {"architecture": "amd64", "os": "linux"}  # buildx's own, when it gives one
    desc = docker._index_of(tmp_path, [arm, amd], ["linux/arm64", "linux/amd64"], epoch=0)
    data = ocilayout.blob_path(tmp_path, str(desc["digest"])).read_bytes()
    assert desc["digest"] == "sha256:" + hashlib.sha256(data).hexdigest() and desc["size"] == len(data)
    assert desc["annotations"] == {ocilayout.CREATED: "1970-01-01T00:00:00Z"}
    index = json.loads(data)
    assert index["mediaType"] == configimage.OCI_INDEX_TYPE
    assert [(m["digest"], m["platform"]) for m in index["manifests"]] == [
        (arm["digest"], {"architecture": "arm64", "os": "linux"}),
        (amd["digest"], {"architecture": "amd64", "os": "linux"}),
    ]
    assert ocilayout.platform_manifests(tmp_path, desc).keys() == {"linux/arm64", "linux/amd64"}


def test_an_index_for_one_platform_is_refused(tmp_path: Path) -> None:
    data = json.dumps({"schemaVersion": 2, "mediaType": configimage.OCI_INDEX_TYPE, "manifests": []}).encode()
    top = {"mediaType": configimage.OCI_INDEX_TYPE, "digest": put(tmp_path, data), "size": len(data)}
    with pytest.raises(DockerError, match="exported an index for linux/arm64 alone"):
        docker._index_of(tmp_path, [top, exported(tmp_path, "amd64")], ["linux/arm64", "linux/amd64"], epoch=None)
