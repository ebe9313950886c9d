"""Fast tests (no docker, no registry) for references, what `imagetools` answers, and the publish plan."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pytest

from imgbuild.errors import ConfigError
from imgbuild.images import publish
from imgbuild.registry import reference, tools


@pytest.mark.parametrize(
    ("text", "host", "repo", "tag", "loopback"),
    [
        ("vllm/vllm-openai:v0.33.0", "docker.io", "vllm/vllm-openai", "v0.33.0", False),
        ("debian", "docker.io", "library/debian", None, False),
        ("127.0.0.1:5000/vllm-dsv41:latest", "127.0.0.1:5000", "vllm-dsv41", "latest", True),
        ("localhost/a/b", "localhost", "a/b", None, True),
        ("ghcr.io/acme/vllm-dsv41:engram-mem", "ghcr.io", "acme/vllm-dsv41", "engram-mem", False),
    ],
)
def test_reference_parse(text: str, host: str, repo: str, tag: str | None, loopback: bool) -> None:
    ref = reference.parse(text)
    assert (ref.host, ref.repository, ref.tag, reference.is_loopback(ref.host)) == (host, repo, tag, loopback)


def test_reference_digest_and_errors() -> None:
    d = "sha256:" + "a" * 64
    ref = reference.parse(f"127.0.0.1:5000/x/y:t@{d}")
    assert ref.ref == d and str(ref) == f"127.0.0.1:5000/x/y:t@{d}"
    assert reference.join("ghcr.io/acme", "vllm-dsv41", "latest").name == "ghcr.io/acme/vllm-dsv41"
    for bad in ("UPPER/case", "x@sha256:zz", "a/b:bad tag"):
        with pytest.raises(ConfigError):
            reference.parse(bad)


INDEX = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {"digest": "sha256:" + "1" * 64, "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:" + "2" * 64, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        {"digest": "sha256:" + "3" * 64, "platform": {"os": "unknown", "architecture": "unknown"}},
        {"digest": "sha256:" + "4" * 64, "platform": {"os": "linux", "architecture": "arm", "variant": "v7"}},
    ],
}


def test_an_index_as_imagetools_prints_it() -> None:
    raw = json.dumps(INDEX, indent=2).encode()
    found = tools.Manifest("r/x:t", raw)
    assert found.digest == "sha256:" + hashlib.sha256(raw).hexdigest()  # the digest is of the bytes as served
    assert found.is_index
    assert found.entries() == [
        ("linux/amd64", "sha256:" + "1" * 64),
        ("linux/arm64", "sha256:" + "2" * 64),  # arm64's v8 is implied
        (None, "sha256:" + "3" * 64),  # an attestation entry
        ("linux/arm/v7", "sha256:" + "4" * 64),
    ]
    single = tools.Manifest("r/x:t", b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}')
    assert not single.is_index and single.entries() == []


def test_the_pushed_digest_is_read_from_docker_push_output() -> None:
    out = "abc: Layer already exists\n1.0.0-0123: digest: sha256:" + "f" * 64 + " size: 1039\n"
    assert tools.PUSHED.findall(out) == ["sha256:" + "f" * 64]


@pytest.mark.parametrize(
    ("stderr", "says"),
    [
        ("unauthorized: authentication required", "docker login 127.0.0.1:5000"),
        ('Head "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused', "running"),
        ("http: server gave HTTP response to HTTPS client", "insecure-registries"),
        ("something else", "IMGBUILD_ECHO=1"),
    ],
)
def test_a_failure_gets_a_hint_for_its_cause(stderr: str, says: str) -> None:
    assert says in tools._hint(stderr, "127.0.0.1:5000")


@dataclass(frozen=True)
class Img:
    variant: str
    platform: str
    image_id: str
    immutable: str
    inputs_digest: str


def _images() -> list[Img]:
    return [
        Img("latest", "linux/arm64", "sha256:" + "a" * 64, "vllm-dsv41:1.0.0-aaaaaaaaaaaa", "a" * 64),
        Img("latest", "linux/amd64", "sha256:" + "b" * 64, "vllm-dsv41:1.0.0-bbbbbbbbbbbb", "b" * 64),
        Img("engram-mem", "linux/arm64", "sha256:" + "c" * 64, "vllm-dsv41:1.0.0-cccccccccccc", "c" * 64),
    ]


def test_the_publish_plan_names_each_platform_by_its_local_tag_and_the_index_by_all() -> None:
    moving = {"latest": ("latest",), "engram-mem": ("engram-mem",)}
    plan = publish.plan_variants(_images(), "127.0.0.1:5000/team", "1.0.0", moving)
    latest, mem = plan
    assert [pi.platform for pi in latest.images] == ["linux/amd64", "linux/arm64"]  # sorted
    assert [pi.target for pi in latest.images] == [
        "127.0.0.1:5000/team/vllm-dsv41:1.0.0-bbbbbbbbbbbb",
        "127.0.0.1:5000/team/vllm-dsv41:1.0.0-aaaaaaaaaaaa",
    ]
    combined = publish.index_inputs({"linux/arm64": "a" * 64, "linux/amd64": "b" * 64})
    assert latest.index_ref == f"127.0.0.1:5000/team/vllm-dsv41:1.0.0-{combined[:12]}"
    assert latest.moving_refs == ["127.0.0.1:5000/team/vllm-dsv41:latest"]
    # one platform still gets an index, under a tag that differs from its manifest's
    assert mem.immutable_tag != "1.0.0-cccccccccccc" and mem.images[0].target.endswith(":1.0.0-cccccccccccc")
    # --repository moves where it goes, not what it is
    other = publish.plan_variants(_images(), "127.0.0.1:5000", "1.0.0", moving, repository="x/y")
    assert other[0].name == "127.0.0.1:5000/x/y" and other[0].immutable_tag == latest.immutable_tag
    assert publish.index_inputs({"a": "1", "b": "2"}) == publish.index_inputs({"b": "2", "a": "1"})


def test_the_index_carries_the_oci_labels_every_platform_agrees_on() -> None:
    oci = "org.opencontainers.image."
    labels = {
        "vllm-dsv41:1.0.0-aaaaaaaaaaaa": {f"{oci}title": "t", f"{oci}base.digest": "sha256:1", "imgbuild.x": "1"},
        "vllm-dsv41:1.0.0-bbbbbbbbbbbb": {f"{oci}title": "t", f"{oci}base.digest": "sha256:2", "imgbuild.x": "1"},
    }
    moving = {"latest": ("latest",), "engram-mem": ()}
    plan = publish.plan_variants(_images(), "127.0.0.1:5000", "1.0.0", moving, image_labels=labels)
    assert plan[0].annotations == {f"{oci}title": "t"}


def test_a_local_ref_without_a_tag_is_refused() -> None:
    assert publish.split_ref("127.0.0.1:5000/a/b:t") == ("127.0.0.1:5000/a/b", "t")
    for bad in ("127.0.0.1:5000/a/b", "plain"):
        with pytest.raises(ConfigError):
            publish.split_ref(bad)
