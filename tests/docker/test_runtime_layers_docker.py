"""The runtime base's package layers through the real engine and a real registry, on small fake trees (fast):
two "locks" that share a package share its layer byte for byte in the store and in the registry, the same lock
built twice (without the cache) gives the same image digest, and a push of the second image uploads only the
layers the registry lacks."""

from __future__ import annotations

import io
import json
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imgbuild.builder import runtime_base as rb
from imgbuild.builder import runtime_layers
from imgbuild.builder.skeleton import SITE_PACKAGES
from imgbuild.engine import Engine
from imgbuild.platforms import Platform
from imgbuild.registry import tools
from tests.support.registry_env import RegistryProcess, docker, uploads

pytestmark = pytest.mark.docker
AMD64 = Platform.parse("linux/amd64")
BIG = runtime_layers.OWN_LAYER_BYTES + 4096  # a package large enough for a layer of its own


def fake_tree(root: Path, pins: dict[str, str]) -> Path:
    """An installed tree of dists `name -> version`, each with its RECORD; `big` weighs BIG bytes."""
    tree = root / "tree"
    for name, version in pins.items():
        pkg, info = tree / name, tree / f"{name}-{version}.dist-info"
        pkg.mkdir(parents=True)
        info.mkdir()
        (pkg / "__init__.py").write_text(f"VERSION = {version!r}\n")
        if name == "big":
            (pkg / "blob.bin").write_bytes(b"\0" * BIG)
        (info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
        files = sorted(p.relative_to(tree).as_posix() for p in [*pkg.iterdir(), *info.iterdir()])
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/RECORD"]))
    with tarfile.open(root / "rootfs.tar", "w") as tar:
        data = b"ID=debian\n"
        info = tarfile.TarInfo("./etc/os-release")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return tree


def build(engine: Engine, root: Path, cache: Path, tag: str, pins: dict[str, str]) -> rb.Layered:
    tree = fake_tree(root, pins)
    return rb.build_layered(
        engine, tree, root / "rootfs.tar", cache, tag=tag, platform=AMD64, site_packages=SITE_PACKAGES,
        pins={n: f"{n}=={v} hash-of-{n}-{v}" for n, v in pins.items()}, labels={rb.LABEL: json.dumps(pins)},
    )  # fmt: skip


@pytest.fixture
def tags() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for tag in made:
        docker("rmi", "-f", tag, check=False)


def test_locks_that_share_a_package_share_its_layer_and_a_push_sends_only_the_rest(
    engine: Engine, tmp_path: Path, tags: list[str]
) -> None:
    name = f"imgbuild-test-layers-{secrets.token_hex(4)}"
    one = {"big": "1.0", "small": "1.0", "vllm": "1.0"}
    two = {"big": "1.0", "small": "2.0", "vllm": "2.0"}
    tags += [f"{name}:one", f"{name}:one-again", f"{name}:two"]
    a = build(engine, tmp_path / "a", tmp_path / "cache", tags[0], one)
    build(engine, tmp_path / "a2", tmp_path / "fresh-cache", tags[1], one)  # no cache: written anew
    b = build(engine, tmp_path / "b", tmp_path / "cache", tags[2], two)
    assert engine.require(tags[0]).id == engine.require(tags[1]).id  # the same lock, built twice: the same digest
    la, lb = dict(a.layers), dict(b.layers)
    vllm = f"bucket-{runtime_layers.bucket_of('vllm'):02d}"  # small here: in its bucket, the last layer
    assert la["pkg-big"] == lb["pkg-big"] and la["rootfs"] == lb["rootfs"] and la[vllm] != lb[vllm]
    assert "pkg-big" not in b.written and vllm in b.written and b.layers[-1][0] == vllm
    # the image's layers are our tars, blob for blob (uncompressed: digest = diff id)
    diff_ids = json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", tags[2]).stdout)
    assert diff_ids == [blob.digest for _, blob in b.layers]

    registry = RegistryProcess.start(tmp_path / "registry")
    try:
        tags += [f"{registry.host}/{name}:one", f"{registry.host}/{name}:two"]  # push tags them here: removed after
        tools.push(tags[0], tags[3])
        mark = registry.log_mark()
        tools.push(tags[2], tags[4])
        sent = {uri for method, uri, _ in uploads(registry.requests_since(mark)) if method == "PUT"}
    finally:
        registry.stop()
    changed = {blob.digest for (n, blob) in b.layers if la.get(n) != blob}
    blob_puts = {u for u in sent if "/blobs/uploads/" in u}
    assert len(blob_puts) == len(changed) + 1, sent  # the changed layers and the config, no more
    assert not any(la["pkg-big"].digest in u or la["rootfs"].digest in u for u in sent)
