"""cosign, the only module that runs it: sign an index, attest an SPDX SBOM per platform image, verify both.

Key-based and offline: a key pair from `cosign generate-key-pair` (the key's
password in COSIGN_PASSWORD), nothing sent to a transparency log
(`--tlog-upload=false`, and `--insecure-ignore-tlog` to verify). Loopback
registries speak plain HTTP (`--allow-http-registry`). Keyless signing needs
an OIDC identity and Rekor, neither reachable here, so it is not offered.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imgbuild import proc
from imgbuild.errors import ConfigError, RegistryError
from imgbuild.plan import labels as lbl
from imgbuild.publish import sbom
from imgbuild.registry import reference

HINT = "install cosign 2.x (.ci/setup-host.sh installs Debian trixie's cosign 2.5), or set IMGBUILD_COSIGN to it"
SPDX_PREDICATE = "https://spdx.dev/Document"
NO_BASE_DIGEST = "NOASSERTION"  # an SBOM's base digest when the base has none (a local stand-in base)


@dataclass(frozen=True)
class Verified:
    ok: bool
    detail: str
    predicate: dict[str, object] | None = None  # the SBOM, for an attestation


def _cli() -> str:
    return os.environ.get("IMGBUILD_COSIGN", "cosign")


def key_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise ConfigError(
            f"{what} {path} does not exist",
            hint="make a key pair with `cosign generate-key-pair` (writes cosign.key, cosign.pub)",
        )
    return path


def _run(args: list[str], ref: str) -> proc.CompletedProcess[str]:
    full = [_cli(), *args]
    if reference.is_loopback(reference.parse(ref).host):
        full.insert(2, "--allow-http-registry")
    full.append(ref)
    try:
        return proc.run(full, text=True, env={**os.environ, "COSIGN_YES": "true"})
    except proc.ToolNotFound as exc:
        raise RegistryError(f"cosign ({_cli()}) is not installed", hint=HINT) from exc


def _fail(what: str, done: proc.CompletedProcess[str]) -> RegistryError:
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-4:])
    return RegistryError(
        f"cosign {what} failed (exit {done.returncode}):\n{tail}",
        hint="check the key, its COSIGN_PASSWORD and the registry credentials",
    )


def sign(ref: str, key: Path) -> None:
    """Sign `ref` (`name@digest`) with the private key."""
    done = _run(["sign", "--key", str(key), "--tlog-upload=false"], ref)
    if done.returncode != 0:
        raise _fail(f"sign {ref}", done)


def attest_sbom(ref: str, sbom: bytes, key: Path) -> None:
    """Attach `sbom` (SPDX JSON) to `ref` (`name@digest`) as a signed in-toto attestation."""
    with tempfile.NamedTemporaryFile(prefix="imgbuild-sbom-", suffix=".spdx.json") as fh:
        fh.write(sbom)
        fh.flush()
        done = _run(
            ["attest", "--key", str(key), "--tlog-upload=false", "--type", "spdxjson", "--predicate", fh.name], ref
        )
    if done.returncode != 0:
        raise _fail(f"attest {ref}", done)


def verify_signature(ref: str, pub: Path) -> Verified:
    done = _run(["verify", "--key", str(pub), "--insecure-ignore-tlog=true", "--output", "json"], ref)
    if done.returncode != 0:
        return Verified(False, _last(done))
    return Verified(True, f"signed, verified with {pub}")


def verify_sbom(ref: str, pub: Path) -> Verified:
    """The SPDX attestation on `ref`, verified; its predicate is the SBOM."""
    args = ["verify-attestation", "--key", str(pub), "--insecure-ignore-tlog=true", "--type", "spdxjson"]
    done = _run(args, ref)
    if done.returncode != 0:
        return Verified(False, _last(done))
    for line in done.stdout.splitlines():
        try:
            envelope = json.loads(line)
            statement = json.loads(base64.b64decode(envelope["payload"]))
        except (ValueError, KeyError, TypeError):
            continue
        predicate = statement.get("predicate")
        if statement.get("predicateType") == SPDX_PREDICATE and isinstance(predicate, dict):
            return Verified(True, f"SPDX attestation verified with {pub}", predicate)
    return Verified(False, "verified, but no SPDX predicate in the attestation")


def _last(done: proc.CompletedProcess[str]) -> str:
    lines = [ln for ln in (done.stderr or done.stdout).strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exit {done.returncode}"


@dataclass(frozen=True)
class SupplyChain:
    signature: Verified
    sbom: Verified
    problems: tuple[str, ...]  # where the verified SBOM disagrees with the image

    @property
    def ok(self) -> bool:
        return self.signature.ok and self.sbom.ok and not self.problems

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "signature": {"verified": self.signature.ok, "detail": self.signature.detail},
            "sbom": {"verified": self.sbom.ok, "detail": self.sbom.detail, "problems": list(self.problems)},
        }


def check_published(tag_ref: str, platform_ref: str, pub: Path, labels: Mapping[str, str]) -> SupplyChain:
    """The signature of what `tag_ref` names (the index) and the SBOM of `platform_ref`, checked against `labels`."""
    signature = verify_signature(tag_ref, pub)
    sbom_v = verify_sbom(platform_ref, pub)
    problems: list[str] = []
    if sbom_v.predicate is not None:
        files = lbl.parse_files(labels.get(f"{lbl.PREFIX}files", "{}"))
        site = labels.get(f"{lbl.PREFIX}site-packages", "")
        problems = sbom.check(sbom_v.predicate, files, site, labels.get(f"{lbl.OCI}base.digest", NO_BASE_DIGEST))
    return SupplyChain(signature, sbom_v, tuple(problems))
