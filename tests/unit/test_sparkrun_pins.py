"""What the sparkrun plugin reports: the published digest `pull_ref` pins, the labels sparkrun's runtime info shows."""

from __future__ import annotations

import json

from imgbuild.deploy.sparkrun_pins import pinned, published, tag_of, version_info

DIGEST = "sha256:" + "ab" * 32


def history(moving: dict[str, str | None]) -> dict[str, object]:
    return {"schema": "imgbuild.history/2", "registry": {"registry": "127.0.0.1:5000", "moving": moving}}


def test_published_is_the_registry_digest_of_the_recipes_tag() -> None:
    doc = history(
        {"127.0.0.1:5000/vllm-dsv41:stable": "sha256:" + "cd" * 32, "127.0.0.1:5000/vllm-dsv41:latest": DIGEST}
    )
    assert published(doc, "vllm-dsv41:latest") == f"127.0.0.1:5000/vllm-dsv41@{DIGEST}"
    assert published(doc, "vllm-dsv41:stable") == "127.0.0.1:5000/vllm-dsv41@sha256:" + "cd" * 32


def test_a_realized_recipes_digest_is_pinned_a_tag_is_not() -> None:
    assert pinned(f"127.0.0.1:5000/vllm-dsv41@{DIGEST}") and pinned(f"vllm-dsv41:latest@{DIGEST}")
    assert not pinned("127.0.0.1:5000/vllm-dsv41:latest") and not pinned("vllm-dsv41")
    assert not pinned("vllm-dsv41@sha256:abc") and not pinned(f"vllm-dsv41@{DIGEST.upper()}")


def test_the_tag_of_a_reference_never_is_a_registry_port() -> None:
    assert tag_of("127.0.0.1:5000/vllm-dsv41") == "latest" and tag_of(f"127.0.0.1:5000/vllm-dsv41@{DIGEST}") == "latest"
    assert tag_of("127.0.0.1:5000/vllm-dsv41:engram-mem") == "engram-mem" and tag_of("vllm-dsv41:stable") == "stable"
    doc = history({"127.0.0.1:5000/vllm-dsv41:latest": DIGEST})
    assert published(doc, "127.0.0.1:5000/vllm-dsv41") == f"127.0.0.1:5000/vllm-dsv41@{DIGEST}"


def test_not_published_is_none() -> None:
    assert published(history({"127.0.0.1:5000/vllm-dsv41:latest": None}), "vllm-dsv41:latest") is None
    assert published(history({"127.0.0.1:5000/vllm-dsv41:stable": DIGEST}), "vllm-dsv41:latest") is None
    assert published({"schema": "imgbuild.history/2", "registry": None}, "vllm-dsv41:latest") is None


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_version_info_from_one_pins_labels() -> None:
    labels = {
        "imgbuild.variant": "engram-mem",
        "imgbuild.inputs": DIGEST,
        "imgbuild.upstream.tag": "v0.34.0",
        "imgbuild.upstream.commit": "0123456789abcdef0123456789abcdef01234567",
        "imgbuild.patches": compact({"0001-sm121": "applied", "0005-engram-disk": "reverted"}),
        "imgbuild.files": compact({"vllm/a.py": ["patched", "x"]}),  # not repeated: the file hashes are a screenful
        "org.opencontainers.image.revision": "feedface",
    }
    assert version_info(labels) == {
        "imgbuild_variant": "engram-mem",
        "imgbuild_inputs": DIGEST,
        "imgbuild_upstream": "v0.34.0 0123456789ab",
        "imgbuild_patches": "0001-sm121 applied, 0005-engram-disk reverted",
        "imgbuild_revision": "feedface",
    }


def test_version_info_names_every_pin_and_override() -> None:
    pins = [
        {"name": "vLLM", "url": "u", "tag": "v0.34.0", "commit": "a" * 40, "package_root": "vllm", "patches": ["0001"]},
        {"name": "flashinfer", "url": "u", "tag": "v0.7.4", "commit": "b" * 40, "package_root": "fi", "patches": []},
    ]
    overrides = [{"pin": "flashinfer", "requirement": "flashinfer-python==0.7.3", "version": "0.7.4", "reason": "r"}]
    labels = {
        "imgbuild.variant": "latest",
        "imgbuild.inputs": DIGEST,
        "imgbuild.upstreams": compact(pins),
        "imgbuild.overrides": compact(overrides),
        "imgbuild.patches": compact({}),
    }
    info = version_info(labels)
    assert info["imgbuild_vllm"] == "v0.34.0 " + "a" * 12
    assert info["imgbuild_flashinfer"] == "v0.7.4 " + "b" * 12
    assert info["imgbuild_override_flashinfer"] == "flashinfer-python==0.7.3 -> 0.7.4"
    assert info["imgbuild_patches"] == "(none)"


def test_an_image_imgbuild_did_not_make_reports_nothing() -> None:
    assert version_info({"org.opencontainers.image.version": "0.34.0"}) == {}
