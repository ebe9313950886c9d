"""The runtime base's package layers through the real engine and a real registry, on small fake trees (fast):
two "locks" that share a package share its layer byte for byte in the store and in the registry, the same lock
built twice (from a fresh layer cache, without BuildKit's cache, on a BuildKit that has forgotten the layers) gives
the same image digest, a lock whose layers left the layout while BuildKit kept its records of them builds again in
one BuildKit call, and a push of the second image uploads only the layers the registry lacks."""

from __future__ import annotations

import io
import json
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imgbuild.builder import runtime_base as rb
from imgbuild.builder import runtime_layers
from imgbuild.builder.skeleton import SITE_PACKAGES
from imgbuild.engine import Engine
from imgbuild.platforms import Platform
from imgbuild.registry import tools
from tests.support.buildkit_records import chains_of, drop_chains
from tests.support.registry_env import RegistryProcess, docker, uploads

pytestmark = pytest.mark.docker
AMD64 = Platform.parse("linux/amd64")
BIG = runtime_layers.OWN_LAYER_BYTES + 4096  # a package large enough for a layer of its own


def fake_tree(root: Path, pins: dict[str, str], token: str = "") -> Path:
    """An installed tree of dists `name -> version`, each with its RECORD; `big` weighs BIG bytes. `token` goes into
    every layer (the rootfs too): layers that no other build made."""
    tree = root / "tree"
    for name, version in pins.items():
        pkg, info = tree / name, tree / f"{name}-{version}.dist-info"
        pkg.mkdir(parents=True)
        info.mkdir()
        (pkg / "__init__.py").write_text(f"VERSION = {version!r}\nTOKEN = {token!r}\n")
        if name == "big":
            (pkg / "blob.bin").write_bytes(b"\0" * BIG)
        (info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
        files = sorted(p.relative_to(tree).as_posix() for p in [*pkg.iterdir(), *info.iterdir()])
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/RECORD"]))
    with tarfile.open(root / "rootfs.tar", "w") as tar:
        data = f"ID=debian\nTOKEN={token}\n".encode()
        info = tarfile.TarInfo("./etc/os-release")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return tree


def build(
    engine: Engine, root: Path, cache: Path, tag: str, pins: dict[str, str], *, token: str = "", no_cache: bool = False
) -> rb.Layered:
    tree = fake_tree(root, pins, token)
    return rb.build_layered(
        engine, tree, root / "rootfs.tar", cache, tag=tag, platform=AMD64, site_packages=SITE_PACKAGES,
        pins={n: f"{n}=={v} hash-of-{n}-{v}" for n, v in pins.items()}, labels={rb.LABEL: json.dumps(pins)},
        no_cache=no_cache,
    )  # fmt: skip


@pytest.fixture
def tags() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for tag in made:
        docker("rmi", "-f", tag, check=False)


@pytest.fixture
def pulled(tags: list[str]) -> Iterator[set[str]]:
    """The layout images (manifest digests) a test made of layers of its own: after it, its images are removed and
    BuildKit's records of those layers dropped (each run's layers are new: they would pile up in BuildKit's cache)."""
    made: set[str] = set()
    yield made
    for tag in tags:
        docker("rmi", "-f", tag, check=False)
    drop_chains(made)


def test_locks_that_share_a_package_share_its_layer_and_a_push_sends_only_the_rest(
    engine: Engine, tmp_path: Path, tags: list[str]
) -> None:
    name = f"imgbuild-test-layers-{secrets.token_hex(4)}"
    one = {"big": "1.0", "small": "1.0", "vllm": "1.0"}
    two = {"big": "1.0", "small": "2.0", "vllm": "2.0"}
    tags += [f"{name}:one", f"{name}:two"]
    a = build(engine, tmp_path / "a", tmp_path / "cache", tags[0], one)
    b = build(engine, tmp_path / "b", tmp_path / "cache", tags[1], two)
    la, lb = dict(a.layers), dict(b.layers)
    vllm = f"bucket-{runtime_layers.bucket_of('vllm'):02d}"  # small here: in its bucket, the last layer
    assert la["pkg-big"] == lb["pkg-big"] and la["rootfs"] == lb["rootfs"] and la[vllm] != lb[vllm]
    assert "pkg-big" not in b.written and vllm in b.written and b.layers[-1][0] == vllm
    # the image's layers are our tars, blob for blob (uncompressed: digest = diff id)
    diff_ids = json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", tags[1]).stdout)
    assert diff_ids == [blob.digest for _, blob in b.layers]

    registry = RegistryProcess.start(tmp_path / "registry")
    try:
        tags += [f"{registry.host}/{name}:one", f"{registry.host}/{name}:two"]  # push tags them here: removed after
        tools.push(tags[0], tags[2])
        mark = registry.log_mark()
        tools.push(tags[1], tags[3])
        sent = {uri for method, uri, _ in uploads(registry.requests_since(mark)) if method == "PUT"}
    finally:
        registry.stop()
    changed = {blob.digest for (n, blob) in b.layers if la.get(n) != blob}
    blob_puts = {u for u in sent if "/blobs/uploads/" in u}
    assert len(blob_puts) == len(changed) + 1, sent  # the changed layers and the config, no more
    assert not any(la["pkg-big"].digest in u or la["rootfs"].digest in u for u in sent)


def history(tag: str) -> list[tuple[str, str]]:
    """The image's history, bottom first: (created by, comment)."""
    out = docker("history", "--no-trunc", "--format", "{{json .}}", tag).stdout
    return [(h["CreatedBy"], h["Comment"]) for h in map(json.loads, reversed(out.splitlines()))]


def test_the_same_lock_gives_the_same_image_whatever_buildkit_pulled_before(
    engine: Engine, tmp_path: Path, tags: list[str], pulled: set[str]
) -> None:
    """Same lock, same image id: the first build comes after another lock that shares its lower layers (BuildKit's
    records of those then say "pulled from" the other lock's layout image); the second from a fresh layer cache,
    with `--no-cache`, after BuildKit's records of these layers were dropped (a BuildKit that never saw them). A layer
    without a history entry in the layout's config would get one that BuildKit makes up from its record ("pulled
    from REF@<whichever image fetched the blob first>", or "created by buildkit"): the image id would differ."""
    token = secrets.token_hex(8)  # layers no earlier build made: every BuildKit record of them is this test's
    name = f"imgbuild-test-same-lock-{token[:8]}"
    one, other = {"big": "1.0", "small": "1.0", "vllm": "1.0"}, {"big": "1.0", "small": "2.0", "vllm": "2.0"}
    tags += [f"{name}:other", f"{name}:one", f"{name}:again"]
    b = build(engine, tmp_path / "b", tmp_path / "cache", tags[0], other, token=token)
    a = build(engine, tmp_path / "a", tmp_path / "cache", tags[1], one, token=token)
    pulled |= {a.manifest.digest, b.manifest.digest}
    assert dict(a.layers)["pkg-big"] == dict(b.layers)["pkg-big"]  # shared: BuildKit fetched it for `other`
    first, first_history = engine.require(tags[1]).id, history(tags[1])
    docker("rmi", tags[0], tags[1])  # an image holds BuildKit's records of its layers
    assert drop_chains(pulled) >= len(a.layers)
    again = build(engine, tmp_path / "again", tmp_path / "fresh-cache", tags[2], one, token=token, no_cache=True)
    assert again.manifest == a.manifest and again.layers == a.layers  # the layout image, written anew
    assert engine.require(tags[2]).id == first
    # the layers' history is the layout's own, then the Dockerfile's; nothing BuildKit made up
    assert first_history[: len(a.layers)] == [(f"imgbuild runtime layer {n}", "") for n, _ in a.layers]
    assert all(comment != "buildkit.exporter.image.v0" for _, comment in first_history), first_history


def test_a_lock_whose_layers_left_the_layout_builds_again_in_one_buildkit_call(
    engine: Engine, tmp_path: Path, tags: list[str], pulled: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the runtime base once answered with a second build without BuildKit's cache ("not found", put down to
    layers dropped from the layout while BuildKit's cache still named them; not reproduced): a lock built, two more
    in the same layer cache (the layout keeps two builds per platform, so the first one's own layers leave it),
    their images removed, BuildKit still holding its records of the first one's layers and a cache entry for its
    layout image. The first lock again: its layers are written anew, and one BuildKit call makes the same image."""
    token = secrets.token_hex(8)
    name = f"imgbuild-test-left-layout-{token[:8]}"
    locks = [{"big": "1.0", "small": f"{i}.0", "vllm": f"{i}.0"} for i in (1, 2, 3)]
    tags += [f"{name}:{i}" for i in range(4)]
    cache = tmp_path / "cache"
    first = build(engine, tmp_path / "0", cache, tags[0], locks[0], token=token)
    first_id = engine.require(tags[0]).id
    pulled.add(first.manifest.digest)  # the bottom layers' records name it; the other locks' layers stand on them
    for i in (1, 2):
        build(engine, tmp_path / str(i), cache, tags[i], locks[i], token=token)
    blobs = rb.layout_dir(cache) / "blobs" / "sha256"
    left = {n for n, blob in first.layers if not (blobs / blob.digest.removeprefix("sha256:")).exists()}
    assert left and "pkg-big" not in left, left  # its own buckets left the layout; the shared layers stayed
    assert not (blobs / first.manifest.digest.removeprefix("sha256:")).exists()
    docker("rmi", *tags[:3])
    assert chains_of({first.manifest.digest})  # BuildKit still holds records pulled from the first layout image
    calls: list[dict[str, Any]] = []
    build_once = engine.build

    def counted(*args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        return build_once(*args, **kwargs)

    monkeypatch.setattr(engine, "build", counted)
    again = build(engine, tmp_path / "again", cache, tags[3], locks[0], token=token)
    assert set(again.written) >= left and again.manifest == first.manifest
    assert [c["no_cache"] for c in calls] == [False]  # one call, with BuildKit's cache
    assert engine.require(tags[3]).id == first_id
