"""configimage: Go's JSON as BuildKit writes it, and refusal (None) wherever it cannot be sure."""

from __future__ import annotations

import json

from imgbuild.images import configimage
from imgbuild.images.configimage import go_json, variant_config, variant_image
from imgbuild.images.ocilayout import OCI_MANIFEST_TYPE

EPOCH = 1796083200  # 2026-12-01T00:00:00Z
PARENT = {
    "architecture": "arm64",
    "config": {"Env": ["PATH=/usr/bin", "A=1"], "Entrypoint": ["vllm", "serve"], "Labels": {"a": "1", "b": "2"}},
    "created": "2026-12-01T00:00:00Z",
    "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "base"}],
    "os": "linux",
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]},
}


def parent_bytes(image: dict[str, object] = PARENT) -> bytes:
    return go_json(image).encode()


def test_go_json_escapes_html_characters_as_go_does() -> None:
    assert go_json({"k": "a<b>&c é"}) == '{"k":"a\\u003cb\\u003e\\u0026c é"}'


def test_env_replaces_in_place_labels_merge_sorted_entrypoint_and_cmd_cleared() -> None:
    out = variant_config(parent_bytes(), [("A", "2"), ("B", "x y")], {"c": "3", "a": "0"}, EPOCH)
    assert out is not None
    image = json.loads(out)
    assert list(image) == sorted(image)
    cfg = image["config"]
    assert list(cfg) == ["Env", "Labels", "ArgsEscaped"] and cfg["ArgsEscaped"] is True
    assert cfg["Env"] == ["PATH=/usr/bin", "A=2", "B=x y"]  # A stays where it was
    assert cfg["Labels"] == {"a": "0", "b": "2", "c": "3"} and list(cfg["Labels"]) == ["a", "b", "c"]
    made = [h["created_by"] for h in image["history"][1:]]
    assert made == ["ENV A=2 B=x y", "LABEL a=0 c=3", "ENTRYPOINT []", "CMD []"]
    assert all(h["created"] == "2026-12-01T00:00:00Z" and h["empty_layer"] for h in image["history"][1:])
    assert image["created"] == "2026-12-01T00:00:00Z"


def test_a_config_not_in_buildkits_form_or_a_control_character_is_left_to_buildkit() -> None:
    assert variant_config(json.dumps(PARENT, indent=1).encode(), [], {}, EPOCH) is None  # not Go's bytes
    odd = {**PARENT, "config": {**PARENT["config"], "Unknown": 1}}  # type: ignore[dict-item]
    assert variant_config(parent_bytes(odd), [], {}, EPOCH) is None  # a key Go's struct would drop
    assert variant_config(parent_bytes(), [], {"a": "line\nbreak"}, EPOCH) is None
    assert variant_config(parent_bytes(), [("K", "tab\there")], {}, EPOCH) is None


def test_manifest_keeps_the_parent_layers_without_annotations_and_index_orders_platforms() -> None:
    layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + "2" * 64, "size": 5}
    parent = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_TYPE,
        "config": {"mediaType": configimage.OCI_CONFIG_TYPE, "digest": "sha256:" + "3" * 64, "size": 9},
        "layers": [{**layer, "annotations": {"buildkit/rewritten-timestamp": str(EPOCH)}}],
    }
    made = variant_image(json.dumps(parent).encode(), parent_bytes(), [], {"x": "1"}, EPOCH)
    assert made is not None
    body = json.loads(made.manifest.data)
    assert body["layers"] == [layer] and body["config"] == made.config.descriptor()
    assert made.manifest.data.startswith(b'{\n  "schemaVersion": 2,\n  "mediaType"')
    docker_media = {**parent, "mediaType": "application/vnd.docker.distribution.manifest.v2+json"}
    assert variant_image(json.dumps(docker_media).encode(), parent_bytes(), [], {}, EPOCH) is None
    idx = json.loads(configimage.index([(made.manifest, {"os": "linux", "architecture": "amd64"})]).data)
    assert idx["manifests"][0]["platform"] == {"architecture": "amd64", "os": "linux"}
