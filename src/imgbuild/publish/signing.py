"""cosign, key-based and offline (no transparency log): sign an index, attest an SPDX SBOM per platform image,
verify both. Keyless signing needs OIDC and Rekor, so it is not offered."""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from imgbuild import proc
from imgbuild.errors import ConfigError, RegistryError
from imgbuild.publish import sbom
from imgbuild.registry import reference
from imgbuild.smoke.supply import SbomVerified, SupplyChain, Verified

HINT = "install cosign 2.x (.ci/setup-host.sh installs Debian trixie's cosign 2.5), or set IMGBUILD_COSIGN to it"
SPDX_PREDICATE = "https://spdx.dev/Document"
VERIFY = ["--insecure-ignore-tlog=true"]


def key_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise ConfigError(
            f"{what} {path} does not exist",
            hint="make a key pair with `cosign generate-key-pair` (writes cosign.key, cosign.pub)",
        )
    return path


def _run(args: list[str], ref: str) -> proc.CompletedProcess[str]:
    cli = os.environ.get("IMGBUILD_COSIGN", "cosign")
    http = ["--allow-http-registry"] if reference.is_loopback(reference.parse(ref).host) else []
    try:
        return proc.run([cli, args[0], *http, *args[1:], ref], text=True, env={**os.environ, "COSIGN_YES": "true"})
    except proc.ToolNotFound as exc:
        raise RegistryError(f"cosign ({cli}) is not installed", hint=HINT) from exc


def _last(done: proc.CompletedProcess[str], n: int = 1) -> str:
    lines = [ln for ln in (done.stderr or done.stdout).strip().splitlines() if ln.strip()]
    return "\n".join(line[:300] for line in lines[-n:]) if lines else f"exit {done.returncode}"


def _write(what: str, args: list[str], ref: str) -> None:
    done = _run([*args, "--tlog-upload=false"], ref)
    if done.returncode != 0:
        raise RegistryError(
            f"cosign {what} {ref} failed (exit {done.returncode}):\n{_last(done, 4)}",
            hint="check the key, its COSIGN_PASSWORD and the registry credentials",
        )


def sign(ref: str, key: Path) -> None:
    """Sign `ref` (`name@digest`) with the private key."""
    _write("sign", ["sign", "--key", str(key)], ref)


def attest_sbom(ref: str, document: bytes, key: Path) -> None:
    """Attach `document` (SPDX JSON) to `ref` (`name@digest`) as a signed in-toto attestation."""
    with tempfile.NamedTemporaryFile(prefix="imgbuild-sbom-", suffix=".spdx.json") as fh:
        fh.write(document)
        fh.flush()
        _write("attest", ["attest", "--key", str(key), "--type", "spdxjson", "--predicate", fh.name], ref)


def verify_sbom(ref: str, pub: Path) -> SbomVerified:
    """The SPDX attestation on `ref`, verified; its predicate is the SBOM."""
    done = _run(["verify-attestation", "--key", str(pub), *VERIFY, "--type", "spdxjson"], ref)
    if done.returncode != 0:
        return SbomVerified(False, _last(done))
    for line in done.stdout.splitlines():
        try:
            statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
        except (ValueError, KeyError, TypeError):
            continue
        predicate = statement.get("predicate")
        if statement.get("predicateType") == SPDX_PREDICATE and isinstance(predicate, dict):
            return SbomVerified(True, f"SPDX attestation verified with {pub}", predicate=predicate)
    return SbomVerified(False, "verified, but no SPDX predicate in the attestation")


def check_published(tag_ref: str, platform_ref: str, pub: Path, labels: Mapping[str, str]) -> SupplyChain:
    """The signature of what `tag_ref` names (the index) and the SBOM of `platform_ref`, checked against `labels`."""
    done = _run(["verify", "--key", str(pub), *VERIFY, "--output", "json"], tag_ref)
    signed = Verified(done.returncode == 0, f"signed, verified with {pub}" if done.returncode == 0 else _last(done))
    found = verify_sbom(platform_ref, pub)
    problems = sbom.check(found.predicate, labels) if found.predicate is not None else []
    return SupplyChain(signature=signed, sbom=replace(found, problems=tuple(problems)))
