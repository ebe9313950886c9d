"""The registry through docker's own tools (`docker push`, `docker buildx imagetools`); credentials, TLS
and retries are docker's. Every failure is a RegistryError naming the reference."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imgbuild import proc
from imgbuild.engine.door import run_cli
from imgbuild.errors import RegistryError
from imgbuild.platforms import Platform

INDEX_TYPES = frozenset(
    {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
)
PUSHED = re.compile(r"digest: (sha256:[0-9a-f]{64})")
TIMEOUT = 3600.0  # a push of a large image over a slow link


@dataclass(frozen=True)
class Manifest:
    """What `imagetools inspect --raw` gave for a reference: a manifest or an index."""

    ref: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def json(self) -> dict[str, Any]:
        value = json.loads(self.data)
        return value if isinstance(value, dict) else {}

    @property
    def media_type(self) -> str:
        return str(self.json().get("mediaType") or "")

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES or (not self.media_type and "manifests" in self.json())

    def entries(self) -> list[tuple[Platform | None, str]]:
        """An index's (platform, manifest digest) pairs, in order (platform None: an attestation or unknown)."""
        return [(platform_of(e.get("platform")), str(e.get("digest"))) for e in self.json().get("manifests") or []]


def platform_of(plat: object) -> Platform | None:
    """The platform of an index entry's or a config's platform fields (`Platform.of`: arm64's `v8` is implied)."""
    if not isinstance(plat, dict) or not plat.get("os") or not plat.get("architecture") or plat["os"] == "unknown":
        return None
    return Platform.of(str(plat["os"]), str(plat["architecture"]), str(plat.get("variant") or ""))


AGAIN = "publish skips what the registry already holds, and moves a moving tag only after every image it names is in"


def docker_config() -> Path:
    """The docker CLI's config file: $DOCKER_CONFIG/config.json, else ~/.docker/config.json."""
    base = os.environ.get("DOCKER_CONFIG")
    return (Path(base) if base else Path.home() / ".docker") / "config.json"


DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")


def credentials_for(host: str, config: Path | None = None) -> str | None:
    """Where the docker config holds credentials for `host` (None: nowhere): its `auths` entry, its credential
    helper for the host, or its credential store (which may or may not hold one; only docker can ask it)."""
    path = config or docker_config()
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None

    def bare(key: str) -> str:
        key = key.removeprefix("https://").removeprefix("http://").split("/", 1)[0]
        return "docker.io" if key in DOCKER_HUB else key

    want = bare(host)
    helpers = doc.get("credHelpers") or {}
    helper = next((v for k, v in helpers.items() if bare(k) == want), None) if isinstance(helpers, dict) else None
    if helper:
        return f"the credential helper docker-credential-{helper} named for it in {path}"
    auths = doc.get("auths") or {}
    entry = next((v for k, v in auths.items() if bare(k) == want), None) if isinstance(auths, dict) else None
    if isinstance(entry, dict) and (entry.get("auth") or entry.get("identitytoken") or entry.get("username")):
        return f"the `auths` entry in {path}"
    if doc.get("credsStore") and isinstance(entry, dict):  # `docker login` with a store leaves an empty entry
        return f"the credential store docker-credential-{doc['credsStore']} that {path} names"
    return None


def _hint(stderr: str, host: str) -> str:
    low = stderr.lower()
    if "unauthorized" in low or "denied" in low or "authentication required" in low or "no basic auth" in low:
        held = credentials_for(host)
        if held is not None:
            return (
                f"the registry refused the credentials the docker config holds for {host} ({held}): they are wrong, "
                f"expired or lack push rights; log in again with the right ones: `docker login {host}`"
            )
        return (
            f"log in first: the docker config ({docker_config()}) has no credentials for {host}; "
            f"`docker login {host}` (imgbuild uses the docker config's credentials)"
        )
    if "connection refused" in low or "no such host" in low or "i/o timeout" in low or "dial tcp" in low:
        return f"is the registry at {host} running and reachable from here? then run the command again ({AGAIN})"
    if re.search(r"\b50[0-4]\b|service unavailable|internal server error|bad gateway", low):
        return (
            f"the registry at {host} failed with a server error (5xx): once it is well, run the command again ({AGAIN})"
        )
    if re.search(r": eof\b|connection reset|broken pipe|unexpected eof|use of closed network connection", low):
        return f"the connection to the registry at {host} was closed mid-request: run the command again ({AGAIN})"
    if "http response to https client" in low:
        return f"{host} speaks plain HTTP: add it to the daemon's insecure-registries, or give it TLS"
    return "run the command above by hand (IMGBUILD_ECHO=1 prints it) to see the registry's answer"


def _tail(text: str) -> str:
    return "\n".join([ln for ln in text.strip().splitlines() if ln.strip()][-4:])


def _run(
    args: Sequence[str], what: str, ref: str, *, text: bool = True, check: bool = True, timeout: float = TIMEOUT
) -> Any:
    """`docker ARGS` through the engine's one door to the docker CLI; a failure (unless `check` is False: then the
    caller reads it) is a RegistryError."""
    host = ref.split("/", 1)[0]
    try:
        done = run_cli(args, text=text, timeout=timeout)
    except proc.ToolNotFound as exc:
        raise RegistryError(
            f"{what}: the docker CLI ({exc.tool}) is not installed",
            hint="install docker and its buildx plugin, or set IMGBUILD_DOCKER",
        ) from exc
    except proc.ToolTimeout as exc:
        raise RegistryError(f"{what}: {exc}", hint=f"is the registry at {host} answering?") from exc
    if check and done.returncode != 0:
        tail = _tail(done.stderr or done.stdout or "") or f"exit {done.returncode}"
        raise RegistryError(f"{what} failed (exit {done.returncode}):\n{tail}", hint=_hint(done.stderr, host))
    return done


def push(local: str, target: str) -> str:
    """Tag the local image `local` as `target` (`host/repo:tag`), push it, and return the digest pushed. The
    `target` tag is for the push only: it is taken off again (`local` keeps the image), so the local store
    names the image as build did, and nothing later finds it under the registry's name."""
    _run(["tag", local, target], f"docker tag {local} {target}", target)
    try:
        done = _run(["push", target], f"docker push {target}", target)
    finally:
        if target != local:
            _run(["image", "rm", "--no-prune", target], f"docker image rm --no-prune {target}", target, check=False)
    found = PUSHED.findall(done.stdout + done.stderr)
    return str(found[-1]) if found else inspect_required(target).digest  # no digest line: ask the registry


def inspect(ref: str) -> Manifest | None:
    """The manifest or index `ref` names, or None when the registry does not have it."""
    args = ["buildx", "imagetools", "inspect", "--raw", ref]
    done = _run(args, f"cannot look up {ref}", ref, text=False, check=False, timeout=300)
    if done.returncode == 0:
        return Manifest(ref, bytes(done.stdout))
    err = bytes(done.stderr).decode(errors="replace")
    if "not found" in err.lower() and "dial tcp" not in err.lower():
        return None
    raise RegistryError(
        f"docker buildx imagetools inspect {ref} failed:\n{_tail(err)}", hint=_hint(err, ref.split("/", 1)[0])
    )


def inspect_required(ref: str) -> Manifest:
    found = inspect(ref)
    if found is None:
        raise RegistryError(f"{ref} is not in the registry", hint="check the name and tag (and that it was pushed)")
    return found


def image_platform(ref: str) -> Platform:
    """The platform of the single image manifest `ref` names, from its config."""
    args = ["buildx", "imagetools", "inspect", "--format", "{{json .Image}}", ref]
    done = _run(args, f"docker buildx imagetools inspect {ref}", ref)
    try:
        found = platform_of(json.loads(done.stdout))
    except ValueError:
        found = None
    if found is None:
        raise RegistryError(f"{ref}: its config names no platform")
    return found


def copy_tag(source: str, target: str) -> None:
    """Point `target` at the index `source` (`host/repo@digest`) names, unchanged: one manifest write (a `docker
    push` of an index would write each platform's manifest under the tag first)."""
    _run(
        ["buildx", "imagetools", "create", "-t", target, source], f"docker buildx imagetools create -t {target}", target
    )


def create_index(target: str, sources: Sequence[str]) -> None:
    """Write at `target` one index over the manifests `sources` (`host/repo@digest`, each one platform's), as
    they are: `imagetools create` with several sources (what a publish of some of a tag's platforms writes)."""
    args = ["buildx", "imagetools", "create", "-t", target, *sources]
    _run(args, f"docker buildx imagetools create -t {target} {' '.join(sources)}", target)


def platforms_at(found: Manifest) -> dict[str, str]:
    """platform -> manifest digest of what a registry ref names: an index's platform entries (attestations and
    unknown ones left out), or the one manifest's platform (read from its config)."""
    if found.is_index:
        return {str(p): d for p, d in found.entries() if p is not None}
    from imgbuild.registry.reference import parse

    return {str(image_platform(f"{parse(found.ref).name}@{found.digest}")): found.digest}


def check_access(ref: str) -> Manifest | None:
    """Ask the registry for `ref` before anything changes: it answers, and accepts docker's credentials for
    reading (None: it answered that `ref` is not there). A refusal is a RegistryError saying which."""
    host = ref.split("/", 1)[0]
    try:
        return inspect(ref)
    except RegistryError as exc:
        if exc.hint and exc.hint.startswith("the registry refused the credentials"):
            raise RegistryError(
                f"the registry at {host} refused the credentials docker holds for it (reading {ref})",
                hint=exc.hint,
            ) from exc
        if exc.hint and exc.hint.startswith("log in first"):
            raise RegistryError(f"the registry at {host} asks for credentials (reading {ref})", hint=exc.hint) from exc
        raise RegistryError(f"cannot publish to {host}: {exc.message}", hint=exc.hint) from exc


def copy_tags(source: str, targets: Sequence[str]) -> None:
    """Point every ref of `targets` at what `source` (`host/repo@digest`) names, unchanged, in one `imagetools
    create` (each tag one manifest write; the digest is kept)."""
    args = ["buildx", "imagetools", "create", *(a for t in targets for a in ("-t", t)), source]
    _run(args, f"docker buildx imagetools create {' '.join(f'-t {t}' for t in targets)} {source}", targets[0])
