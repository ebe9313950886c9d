"""What the sparkrun builder plugin tells sparkrun about an image, pure (standard library only, so the fast tier
tests it without sparkrun): whether the recipe already pins its image by digest (`sparkrun export recipe --realize`
writes `REG/REPO@sha256:...`), the published reference by digest from `imgbuild history --registry --json`
(`pull_ref`), and the image's labels as sparkrun's runtime info (`collect_container_labels`)."""

from __future__ import annotations

import json
import re
from typing import Any


def pinned(image: str) -> bool:
    """`image` names one manifest by digest (`[REG/]REPO[:TAG]@sha256:<64 hex>`), as a realized recipe does: the
    launch runs exactly that image, whatever the registry's tag names now."""
    return re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", image) is not None


def tag_of(image: str) -> str:
    """The tag of `[REG[:PORT]/]REPO[:TAG][@DIGEST]`, `latest` when it has none (a registry's port is no tag)."""
    name = image.partition("@")[0].rpartition("/")[2]
    return name.rpartition(":")[2] if ":" in name else "latest"


def published(doc: dict[str, Any], container: str) -> str | None:
    """`REG/REPO@sha256:...` that the registry's tag of the recipe's `container` names (`history --registry
    --json`'s `registry.moving`); None when the registry does not have that tag (the variant is not published)."""
    tag = tag_of(container)
    for ref, digest in ((doc.get("registry") or {}).get("moving") or {}).items():
        if digest and ref.rpartition(":")[2] == tag:
            return f"{ref.rpartition(':')[0]}@{digest}"
    return None


LABEL = "imgbuild."
OCI = "org.opencontainers.image."


def version_info(labels: dict[str, str]) -> dict[str, str]:
    """What an imgbuild image says of itself in its labels, as sparkrun's runtime info (flat `imgbuild_*` keys):
    the variant, each upstream pin (tag and commit), each requirement override, the patches with their states, the
    inputs digest and the project revision. Empty for an image without imgbuild's labels."""
    if f"{LABEL}inputs" not in labels:
        return {}
    out = {"imgbuild_variant": labels.get(f"{LABEL}variant", ""), "imgbuild_inputs": labels[f"{LABEL}inputs"]}
    pins = _json_label(labels, f"{LABEL}upstreams", [])
    if not isinstance(pins, list) or not pins:  # one pin: imgbuild.upstream.*, named by the image's version
        pins = [{"name": "upstream", "tag": labels.get(f"{LABEL}upstream.tag", ""),
                 "commit": labels.get(f"{LABEL}upstream.commit", "")}]  # fmt: skip
    for pin in pins:
        if isinstance(pin, dict):
            name = _key(str(pin.get("name") or "upstream"))
            out[f"imgbuild_{name}"] = f"{pin.get('tag', '')} {str(pin.get('commit', ''))[:12]}".strip()
    overrides = _json_label(labels, f"{LABEL}overrides", [])
    for o in overrides if isinstance(overrides, list) else []:
        if isinstance(o, dict):
            out[f"imgbuild_override_{_key(str(o.get('pin', '')))}"] = (
                f"{o.get('requirement', '')} -> {o.get('version', '')}"
            )
    patches = _json_label(labels, f"{LABEL}patches", {})
    if isinstance(patches, dict):
        out["imgbuild_patches"] = ", ".join(f"{name} {state}" for name, state in patches.items()) or "(none)"
    if labels.get(f"{OCI}revision"):
        out["imgbuild_revision"] = labels[f"{OCI}revision"]
    return out


def _key(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower())


def _json_label(labels: dict[str, str], key: str, default: object) -> object:
    try:
        return json.loads(labels[key]) if labels.get(key) else default
    except ValueError:
        return default
