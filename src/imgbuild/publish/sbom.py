"""An SPDX 2.3 SBOM of one published platform image, from the plan (pure).

It says what imgbuild put in the image, exactly: the overlay files with
their sha256 (as their labels say, patched or original), the vLLM release
they come from, and the base by digest. What the base itself contains is the
base's own SBOM's business. Everything comes from the inputs (`created` too),
so equal inputs give byte-equal documents.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imgbuild import __version__
from imgbuild.plan import labels as lbl

SPDX_VERSION = "SPDX-2.3"
NAMESPACE = "https://spdx.org/spdxdocs/imgbuild"  # + the manifest digest: unique per image


@dataclass(frozen=True)
class ImageFacts:
    """What an SBOM of one platform image says, taken from its plan."""

    name: str  # the image without a tag, e.g. 127.0.0.1:5000/t/vllm-dsv41
    title: str  # e.g. vllm-dsv41:latest
    platform: str
    manifest_digest: str
    labels: Mapping[str, str]
    base_name: str
    base_digest: str
    site_packages: str
    files: tuple[lbl.FileLabel, ...] | None = None  # the plan's; None: read from the imgbuild.files label


def _purl_oci(name: str, digest: str, platform: str | None = None) -> str:
    repo = name.rsplit("/", 1)[-1]
    query = f"?repository_url={name}" + (f"&arch={platform.split('/')[1]}" if platform else "")
    return f"pkg:oci/{repo}@{digest.replace(':', '%3A')}{query}"


def _ref(category: str, kind: str, locator: str) -> dict[str, str]:
    return {"referenceCategory": category, "referenceType": kind, "referenceLocator": locator}


def spdx(facts: ImageFacts) -> dict[str, object]:
    lab = facts.labels
    upstream_url = lab.get(f"{lbl.PREFIX}upstream.url", "")
    tag, commit = lab.get(f"{lbl.PREFIX}upstream.tag", ""), lab.get(f"{lbl.PREFIX}upstream.commit", "")
    patches = lab.get(f"{lbl.PREFIX}patches", "{}")
    version = lab.get(f"{lbl.OCI}version", "")
    files = facts.files if facts.files is not None else lbl.parse_files(lab[f"{lbl.PREFIX}files"])
    site = facts.site_packages.rstrip("/")
    file_entries: list[dict[str, object]] = []
    for i, f in enumerate(files):
        entry: dict[str, object] = {
            "SPDXID": f"SPDXRef-File-{i}",
            "fileName": f"{site}/{f.path}",
            "checksums": [{"algorithm": "SHA256", "checksumValue": f.sha256}],
            "comment": f"{f.state} ({'overlaid by imgbuild' if f.state == 'patched' else 'the base release file'})",
        }
        file_entries.append(entry)
    vllm: dict[str, object] = {
        "SPDXID": "SPDXRef-Package-vllm",
        "name": "vllm",
        "versionInfo": version,
        "downloadLocation": upstream_url if "://" in upstream_url else "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "Apache-2.0",
        "comment": f"release {tag} at {commit}, patches: {patches}",
        "externalRefs": [_ref("PACKAGE-MANAGER", "purl", f"pkg:pypi/vllm@{version}")],
    }
    image: dict[str, object] = {
        "SPDXID": "SPDXRef-Package-image",
        "name": facts.title,
        "versionInfo": facts.manifest_digest,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": lab.get(f"{lbl.OCI}licenses", "NOASSERTION"),
        "externalRefs": [_ref("PACKAGE-MANAGER", "purl", _purl_oci(facts.name, facts.manifest_digest, facts.platform))],
    }
    base: dict[str, object] = {
        "SPDXID": "SPDXRef-Package-base",
        "name": facts.base_name,
        "versionInfo": facts.base_digest,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "externalRefs": [_ref("PACKAGE-MANAGER", "purl", _purl_oci(_untagged(facts.base_name), facts.base_digest))],
    }
    rels = [
        _rel("SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Package-image"),
        _rel("SPDXRef-Package-image", "DESCENDANT_OF", "SPDXRef-Package-base"),
        _rel("SPDXRef-Package-image", "CONTAINS", "SPDXRef-Package-vllm"),
        *(_rel("SPDXRef-Package-image", "CONTAINS", str(e["SPDXID"])) for e in file_entries),
    ]
    return {
        "spdxVersion": SPDX_VERSION,
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{facts.title} {facts.platform}",
        "documentNamespace": f"{NAMESPACE}/{facts.manifest_digest}",
        "creationInfo": {"created": lab.get(f"{lbl.OCI}created", ""), "creators": [f"Tool: imgbuild-{__version__}"]},
        "packages": [image, vllm, base],
        "files": file_entries,
        "relationships": rels,
    }


def _rel(a: str, kind: str, b: str) -> dict[str, str]:
    return {"spdxElementId": a, "relationshipType": kind, "relatedSpdxElement": b}


def _untagged(name: str) -> str:
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        last[-1] = last[-1].split(":", 1)[0]
    return "/".join(last)


def render(doc: Mapping[str, object]) -> bytes:
    return json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"


def check(doc: Mapping[str, object], files: Sequence[lbl.FileLabel], site: str, base_digest: str) -> list[str]:
    """What an SBOM read back from a registry gets wrong about an image (its labels); empty: it agrees."""
    have: dict[str, object] = {}
    for entry in _dicts(doc.get("files")):
        for c in _dicts(entry.get("checksums")):
            if c.get("algorithm") == "SHA256":
                have[str(entry.get("fileName"))] = c.get("checksumValue")
    problems = []
    for f in files:
        path = f"{site.rstrip('/')}/{f.path}"
        if have.get(path) != f.sha256:
            problems.append(f"SBOM: {path}: {have.get(path) or 'missing'}, the image has {f.sha256}")
    bases = [p for p in _dicts(doc.get("packages")) if p.get("SPDXID") == "SPDXRef-Package-base"]
    if not bases or bases[0].get("versionInfo") != base_digest:
        problems.append(f"SBOM: the base is not named by {base_digest}")
    return problems


def _dicts(value: object) -> list[dict[str, object]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
