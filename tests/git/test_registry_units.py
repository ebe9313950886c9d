"""Fast tests (no docker, no registry) for references, what `imagetools` answers, and the publish plan."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from imgbuild.errors import ConfigError
from imgbuild.platforms import Platform
from imgbuild.publish import push as publish
from imgbuild.registry import reference, tools
from imgbuild.shapes import dump


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
    assert ref.digest == d and str(ref) == f"127.0.0.1:5000/x/y:t@{d}"
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
    assert [(p and str(p), d) for p, d in found.entries()] == [
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
        ("received unexpected HTTP status: 503 Service Unavailable", "server error (5xx)"),
        ('failed to do request: Post "https://127.0.0.1:5000/v2/x/blobs/uploads/": EOF', "closed mid-request"),
        ("read tcp 127.0.0.1:1->127.0.0.1:5000: read: connection reset by peer", "closed mid-request"),
    ],
)
def test_a_failure_gets_a_hint_for_its_cause(stderr: str, says: str) -> None:
    assert says in tools._hint(stderr, "127.0.0.1:5000")


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"auths": {}}, "has no credentials for 127.0.0.1:5000"),
        ({"auths": {"127.0.0.1:5001": {"auth": "eDp5"}}}, "has no credentials for 127.0.0.1:5000"),
        ({"auths": {"127.0.0.1:5000": {"auth": "eDp5"}}}, "refused the credentials the docker config holds"),
        ({"auths": {"http://127.0.0.1:5000/v2/": {"auth": "eDp5"}}}, "the `auths` entry in"),
        ({"credHelpers": {"127.0.0.1:5000": "pass"}}, "docker-credential-pass"),
        ({"credsStore": "secretservice", "auths": {"127.0.0.1:5000": {}}}, "docker-credential-secretservice"),
        ({"credsStore": "secretservice", "auths": {}}, "log in first"),
    ],
)
def test_unauthorized_says_whether_the_docker_config_holds_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, object], says: str
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    hint = tools._hint("unauthorized: authentication required", "127.0.0.1:5000")
    assert says in hint and "docker login 127.0.0.1:5000" in hint, hint


@dataclass(frozen=True)
class Img:
    """What `build` reports of one image (ImageBuilt's fields that publish reads)."""

    variant: str
    platform: str
    image_id: str
    immutable: str
    inputs_digest: str
    moving: tuple[str, ...]
    index: str = ""
    index_ref: str = ""


@dataclass(frozen=True)
class Built:
    images: list[Img]


JOIN = "sha256:" + "d" * 64


def _built() -> Built:
    join = {"index": JOIN, "index_ref": "vllm-dsv41:1.0.0-dddddddddddd"}
    return Built([
        Img("latest", "linux/arm64", "sha256:" + "a" * 64, "vllm-dsv41:1.0.0-aaaaaaaaaaaa", "a" * 64,
            ("vllm-dsv41:latest",), **join),
        Img("latest", "linux/amd64", "sha256:" + "b" * 64, "vllm-dsv41:1.0.0-bbbbbbbbbbbb", "b" * 64,
            ("vllm-dsv41:latest",), **join),
        Img("engram-mem", "linux/arm64", "sha256:" + "c" * 64, "vllm-dsv41:1.0.0-cccccccccccc", "c" * 64,
            ("vllm-dsv41:engram-mem",)),
    ])  # fmt: skip


def test_publish_pushes_each_local_tag_as_it_is_and_the_moving_tags_name_the_top() -> None:
    labels = {"sha256:" + "a" * 64: {"org.opencontainers.image.title": "t"}}
    latest, mem = publish.plan_built(_built(), "127.0.0.1:5000/team", None, labels)  # type: ignore[arg-type]
    assert [p.target for p in latest.images] == [
        "127.0.0.1:5000/team/vllm-dsv41:1.0.0-aaaaaaaaaaaa",
        "127.0.0.1:5000/team/vllm-dsv41:1.0.0-bbbbbbbbbbbb",
    ]
    assert latest.images[0].labels == {"org.opencontainers.image.title": "t"}
    # several platforms: the local join, under its own immutable tag, is what the moving tags name
    assert (latest.top.local, latest.top.digest) == ("vllm-dsv41:1.0.0-dddddddddddd", JOIN)
    assert latest.top.target == "127.0.0.1:5000/team/vllm-dsv41:1.0.0-dddddddddddd"
    assert latest.moving_refs == ["127.0.0.1:5000/team/vllm-dsv41:latest"]
    # one platform: no index; the moving tag names the image itself, as it does locally
    assert mem.top == mem.images[0] and mem.top.digest == "sha256:" + "c" * 64
    # --repository: the repository the build used (it names the images locally too), under the registry
    (other, _) = publish.plan_built(_built(), "127.0.0.1:5000", "x/y", {})  # type: ignore[arg-type]
    assert other.name == "127.0.0.1:5000/x/y" and other.top.digest == JOIN


def test_a_local_ref_without_a_tag_is_refused() -> None:
    assert publish.split_ref("127.0.0.1:5000/a/b:t") == ("127.0.0.1:5000/a/b", "t")
    for bad in ("127.0.0.1:5000/a/b", "plain"):
        with pytest.raises(ConfigError):
            publish.split_ref(bad)


def test_a_moving_tag_keeps_the_platforms_a_publish_does_not_make() -> None:
    amd, arm, arm2 = ("sha256:" + c * 64 for c in "abc")
    both = {"linux/amd64": amd, "linux/arm64": arm}
    # arm64 alone over an index of both: the new arm64 beside the amd64 it had, by digest
    assert publish.merged(both, {"linux/arm64": arm2}) == ({"linux/amd64": amd, "linux/arm64": arm2}, ("linux/amd64",))
    # every platform it had: nothing kept; nothing there: only the new ones
    assert publish.merged(both, {"linux/arm64": arm2, "linux/amd64": amd}) == (
        {"linux/amd64": amd, "linux/arm64": arm2},
        (),
    )
    assert publish.merged(None, {"linux/arm64": arm}) == ({"linux/arm64": arm}, ())
    # what --dry-run says: before as read, after with the platforms kept
    vp = publish.VariantPublish(
        "engram-mem",
        "127.0.0.1:5000/x",
        (publish.Push("x:1.0.0-cccccccccccc", arm2, "127.0.0.1:5000/x", (Platform.parse("linux/arm64"),)),),
        publish.Push("x:1.0.0-cccccccccccc", arm2, "127.0.0.1:5000/x", (Platform.parse("linux/arm64"),)),
        ("engram-mem",),
        {"127.0.0.1:5000/x:engram-mem": both},
    )
    (moving,) = dump(vp.planned())["moving_index"]
    assert moving == {
        "ref": "127.0.0.1:5000/x:engram-mem",
        "before": both,
        "after": {"linux/amd64": amd, "linux/arm64": arm2},
        "kept": ["linux/amd64"],
    }


def test_an_index_lists_its_platforms_without_attestations() -> None:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    index = {
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"digest": a, "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": b, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"digest": b, "platform": {"os": "unknown", "architecture": "unknown"}},
        ],
    }
    found = tools.Manifest("127.0.0.1:5000/x:latest", json.dumps(index).encode())
    assert tools.platforms_at(found) == {"linux/amd64": a, "linux/arm64": b}
