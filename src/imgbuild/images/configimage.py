"""A variant image that only sets ENV, LABEL, ENTRYPOINT [] and CMD [] over its parent, written without BuildKit (pure).

The variant Dockerfile (dockerfile.render_variant) adds no filesystem layer:
its image is the parent's layers under a new config. This module writes the
config, manifest and (for several platforms) index bytes that Docker 26's
BuildKit (v0.13, oci exporter, SOURCE_DATE_EPOCH) writes for that
Dockerfile, byte for byte, so the image id (manifest digest) is the one the
BuildKit build gives; tests/docker/test_config_image.py holds the two equal.

What BuildKit does, and what is copied here:
- ENV replaces a key where it stands in Env, else appends (`addEnv`); LABEL
  sets keys; ENTRYPOINT [] and CMD [] leave both unset (omitted as empty)
  and CMD sets ArgsEscaped; each instruction appends a history entry
  (`ENV K=V ...`, `LABEL k=v ...`, `ENTRYPOINT []`, `CMD []`) dated at the epoch.
- The config is Go's JSON of a map (top-level keys sorted, compact) whose
  `config` is Go's struct order; Go escapes <, > and & as \\u003c etc.
- The manifest and index are Go's indented JSON; inherited layer descriptors
  lose their annotations.

Anything outside what is known here (a config key Go's struct would drop,
a value with a control character, a media type other than OCI's) returns
None, and the caller builds with BuildKit instead.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imgbuild.images.ocilayout import OCI_INDEX_TYPE, OCI_MANIFEST_TYPE

OCI_CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
COMMENT = "buildkit.dockerfile.v0"
# DockerOCIImageConfig: ocispec.ImageConfig's fields, then Docker's extensions, in Go struct order.
CONFIG_ORDER = (
    "User",
    "ExposedPorts",
    "Env",
    "Entrypoint",
    "Cmd",
    "Volumes",
    "WorkingDir",
    "Labels",
    "StopSignal",
    "ArgsEscaped",
    "Healthcheck",
    "OnBuild",
    "Shell",
)
HISTORY_ORDER = ("created", "created_by", "author", "comment", "empty_layer")
PLATFORM_ORDER = ("architecture", "os", "os.version", "os.features", "variant")


@dataclass(frozen=True)
class Blob:
    data: bytes
    media_type: str

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}


@dataclass(frozen=True)
class ConfigImage:
    config: Blob
    manifest: Blob


def go_json(value: object) -> str:
    """json.Marshal's compact output for JSON data (map keys as given: sort them first where Go would)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
        text = text.replace(char, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def go_indent(value: object) -> bytes:
    """json.MarshalIndent(value, "", "  ") for the plain values of a manifest or index."""
    return json.dumps(value, indent=2, ensure_ascii=False).encode()


def plain(text: str) -> bool:
    """No control character: Go and Python escape some of them differently, and the Dockerfile lexer too."""
    return not any(ord(c) < 0x20 or c in "\u2028\u2029" for c in text)


def timestamp(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ordered(obj: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any] | None:
    if set(obj) - set(order):
        return None
    return {k: obj[k] for k in order if k in obj}


def _add_env(env: list[str], key: str, value: str) -> list[str]:
    for i, item in enumerate(env):
        if item.split("=", 1)[0] == key:
            return [*env[:i], f"{key}={value}", *env[i + 1 :]]
    return [*env, f"{key}={value}"]


def normalized(config: bytes) -> dict[str, Any] | None:
    """The parent's config in Go's order; None unless writing it back gives its bytes (then BuildKit wrote it so)."""
    try:
        image = json.loads(config)
    except ValueError:
        return None
    if not isinstance(image, dict) or not isinstance(image.get("config") or {}, dict):
        return None
    inner = _ordered(image.get("config") or {}, CONFIG_ORDER)
    history = [_ordered(h, HISTORY_ORDER) if isinstance(h, dict) else None for h in image.get("history") or []]
    if inner is None or any(h is None for h in history):
        return None
    if isinstance(inner.get("Labels"), dict):
        inner["Labels"] = dict(sorted(inner["Labels"].items()))
    out = dict(sorted({**image, "config": inner, "history": history}.items()))
    if "history" not in image:
        out.pop("history")
    if go_json(out).encode() != config:
        return None
    out.setdefault("history", [])
    return out


def variant_config(
    parent_config: bytes, env: Sequence[tuple[str, str]], labels: Mapping[str, str], epoch: int
) -> bytes | None:
    """The config BuildKit writes for render_variant(parent, env, labels); None where this is not sure."""
    if not all(plain(t) for pair in [*env, *labels.items()] for t in pair):
        return None
    image = normalized(parent_config)
    if image is None:
        return None
    history: list[dict[str, Any]] = list(image["history"])
    inner: dict[str, Any] = image["config"]
    when = timestamp(epoch)

    def commit(line: str) -> None:
        history.append({"created": when, "created_by": line, "comment": COMMENT, "empty_layer": True})

    cfg = dict(inner)
    if env:
        values = list(cfg.get("Env") or [])
        for key, value in env:
            values = _add_env(values, key, value)
        cfg["Env"] = values
        commit("ENV " + " ".join(f"{k}={v}" for k, v in env))
    if labels:
        cfg["Labels"] = {**(cfg.get("Labels") or {}), **labels}
        commit("LABEL " + " ".join(f"{k}={v}" for k, v in sorted(labels.items())))
    cfg.pop("Entrypoint", None)  # ENTRYPOINT []: an empty list, omitted; it also unsets an inherited Cmd
    cfg.pop("Cmd", None)
    commit("ENTRYPOINT []")
    cfg["ArgsEscaped"] = True
    commit("CMD []")
    cfg = {k: cfg[k] for k in CONFIG_ORDER if k in cfg}
    if "Labels" in cfg:
        cfg["Labels"] = dict(sorted(cfg["Labels"].items()))
    image["config"] = cfg
    image["created"] = when
    image["history"] = history
    return go_json(dict(sorted(image.items()))).encode()


def oci_manifest(data: bytes) -> dict[str, Any] | None:
    """A parent's manifest, where it is an OCI one with an OCI config (what BuildKit exports); else None."""
    try:
        manifest = json.loads(data)
    except ValueError:
        return None
    if not isinstance(manifest, dict) or manifest.get("mediaType") != OCI_MANIFEST_TYPE:
        return None
    return manifest if (manifest.get("config") or {}).get("mediaType") == OCI_CONFIG_TYPE else None


def variant_image(
    parent_manifest: bytes, parent_config: bytes, env: Sequence[tuple[str, str]], labels: Mapping[str, str], epoch: int
) -> ConfigImage | None:
    """Config and manifest of the variant image over a parent's OCI manifest; None where this is not sure."""
    manifest = oci_manifest(parent_manifest)
    if manifest is None:
        return None
    config_bytes = variant_config(parent_config, env, labels, epoch)
    if config_bytes is None:
        return None
    config = Blob(config_bytes, OCI_CONFIG_TYPE)
    layers = [{k: d[k] for k in ("mediaType", "digest", "size")} for d in manifest.get("layers") or []]
    body = {"schemaVersion": 2, "mediaType": OCI_MANIFEST_TYPE, "config": config.descriptor(), "layers": layers}
    return ConfigImage(config, Blob(go_indent(body), OCI_MANIFEST_TYPE))


def index(manifests: Sequence[tuple[Blob, Mapping[str, Any]]]) -> Blob:
    """The multi-platform index over (manifest, platform) pairs, in the order given."""
    entries = []
    for blob, platform in manifests:
        plat = _ordered(platform, PLATFORM_ORDER) or dict(platform)
        entries.append({**blob.descriptor(), "platform": plat})
    return Blob(go_indent({"schemaVersion": 2, "mediaType": OCI_INDEX_TYPE, "manifests": entries}), OCI_INDEX_TYPE)
