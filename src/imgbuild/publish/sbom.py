"""An SPDX 2.3 SBOM of one published platform image, from its labels only (equal labels, byte-equal documents):
the overlay files with their sha256, the vLLM release, and the base by digest."""

from __future__ import annotations

import json
from collections.abc import Mapping

from imgbuild import __version__
from imgbuild.plan import labels as lbl

NAMESPACE = "https://spdx.org/spdxdocs/imgbuild"  # + the manifest digest: unique per image
NO_BASE_DIGEST = "NOASSERTION"  # the base digest of an image built on a base without one (a local stand-in)


def _purl_oci(name: str, digest: str, platform: str | None = None) -> str:
    query = f"?repository_url={name}" + (f"&arch={platform.split('/')[1]}" if platform else "")
    return f"pkg:oci/{name.rsplit('/', 1)[-1]}@{digest.replace(':', '%3A')}{query}"


def _package(spdx_id: str, name: str, version: str, purl: str, **more: object) -> dict[str, object]:
    return {
        "SPDXID": spdx_id,
        "name": name,
        "versionInfo": version,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": purl}],
        **more,
    }


def _rel(a: str, kind: str, b: str) -> dict[str, str]:
    return {"spdxElementId": a, "relationshipType": kind, "relatedSpdxElement": b}


def base_digest(labels: Mapping[str, str]) -> str:
    return labels.get(f"{lbl.OCI}base.digest", NO_BASE_DIGEST)


def spdx(name: str, platform: str, manifest_digest: str, labels: Mapping[str, str]) -> dict[str, object]:
    """The SBOM of the image `name@manifest_digest` (`name`: the registry repository, no tag)."""
    title = labels.get(f"{lbl.OCI}title", labels.get(f"{lbl.PREFIX}variant", ""))
    site = labels.get(f"{lbl.PREFIX}site-packages", "").rstrip("/")
    files = [
        {
            "SPDXID": f"SPDXRef-File-{i}",
            "fileName": f"{site}/{f.path}",
            "checksums": [{"algorithm": "SHA256", "checksumValue": f.sha256}],
            "comment": f"{f.state} ({'overlaid by imgbuild' if f.state == 'patched' else 'the base release file'})",
        }
        for i, f in enumerate(lbl.parse_files(labels[f"{lbl.PREFIX}files"]))
    ]
    url, version = labels.get(f"{lbl.PREFIX}upstream.url", ""), labels.get(f"{lbl.OCI}version", "")
    tag, commit = labels.get(f"{lbl.PREFIX}upstream.tag", ""), labels.get(f"{lbl.PREFIX}upstream.commit", "")
    vllm = _package(
        "SPDXRef-Package-vllm", "vllm", version, f"pkg:pypi/vllm@{version}",
        downloadLocation=url if "://" in url else "NOASSERTION", licenseDeclared="Apache-2.0",
        comment=f"release {tag} at {commit}, patches: {labels.get(f'{lbl.PREFIX}patches', '{}')}",
    )  # fmt: skip
    image = _package(
        "SPDXRef-Package-image", title, manifest_digest, _purl_oci(name, manifest_digest, platform),
        licenseDeclared=labels.get(f"{lbl.OCI}licenses", "NOASSERTION"),
    )  # fmt: skip
    base_name = labels.get(f"{lbl.OCI}base.name", "")
    if base_name and f"{lbl.OCI}base.digest" in labels:
        last = base_name.split("@", 1)[0].rsplit("/", 1)  # neither a digest nor a tag is part of the name
        untagged = "/".join([*last[:-1], last[-1].split(":", 1)[0]])
        base = _package(
            "SPDXRef-Package-base", base_name, base_digest(labels), _purl_oci(untagged, base_digest(labels))
        )
    else:  # no registry origin (a stand-in, a loaded image): no name, digest or purl it does not have
        base = {**_package("SPDXRef-Package-base", NO_BASE_DIGEST, NO_BASE_DIGEST, ""), "externalRefs": []}
    rels = [
        _rel("SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Package-image"),
        _rel("SPDXRef-Package-image", "DESCENDANT_OF", "SPDXRef-Package-base"),
        _rel("SPDXRef-Package-image", "CONTAINS", "SPDXRef-Package-vllm"),
        *(_rel("SPDXRef-Package-image", "CONTAINS", str(f["SPDXID"])) for f in files),
    ]
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{title} {platform}",
        "documentNamespace": f"{NAMESPACE}/{manifest_digest}",
        "creationInfo": {"created": labels.get(f"{lbl.OCI}created", ""), "creators": [f"Tool: imgbuild-{__version__}"]},
        "packages": [image, vllm, base],
        "files": files,
        "relationships": rels,
    }


def render(doc: Mapping[str, object]) -> bytes:
    return json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"


def check(doc: Mapping[str, object], labels: Mapping[str, str]) -> list[str]:
    """What an SBOM read back from a registry gets wrong about the image with `labels`; empty: it agrees."""
    have = {}
    for entry in _dicts(doc.get("files")):
        for c in _dicts(entry.get("checksums")):
            if c.get("algorithm") == "SHA256":
                have[str(entry.get("fileName"))] = c.get("checksumValue")
    site = labels.get(f"{lbl.PREFIX}site-packages", "").rstrip("/")
    problems = []
    for f in lbl.parse_files(labels.get(f"{lbl.PREFIX}files", "{}")):
        path = f"{site}/{f.path}"
        if have.get(path) != f.sha256:
            problems.append(f"SBOM: {path}: {have.get(path) or 'missing'}, the image has {f.sha256}")
    bases = [p for p in _dicts(doc.get("packages")) if p.get("SPDXID") == "SPDXRef-Package-base"]
    if not bases or bases[0].get("versionInfo") != base_digest(labels):
        problems.append(f"SBOM: the base is not named by {base_digest(labels)}")
    return problems


def _dicts(value: object) -> list[dict[str, object]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
