"""The registry, through the engine's own tools: `docker push` and `docker buildx imagetools`.

Everything imgbuild does in a registry goes through here, and through `proc.run`:

- `push`: `docker tag` a local image to its registry name, then `docker push`
  it. The registry skips the blobs it has, and on the containerd image store
  the pushed manifest is the local one, so its digest is the local image id
  (`push` returns the digest the push reports; the caller checks it).
- `copy_tag`: `docker buildx imagetools create -t TAG REPO@DIGEST` from one
  index, which the registry gets unchanged (the same digest) in one write.
- `inspect`: `docker buildx imagetools inspect --raw`, the manifest or index
  a reference names, byte for byte (its digest is the sha256 of those
  bytes); `image_platform` reads a single manifest's platform from its
  config (`--format '{{json .Image}}'`).

Credentials, TLS, token auth, cross-repository mounts and retries are the
tools' business (the docker config and `docker login`), so no registry
client, auth code, layer, config or manifest writer of imgbuild's remains.
Every failure is a `RegistryError` (exit 9) that names the reference and
says what to try.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from imgbuild import proc
from imgbuild.errors import RegistryError

INDEX_TYPES = frozenset(
    {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
)
PUSHED = re.compile(r"digest: (sha256:[0-9a-f]{64})")
TIMEOUT = 3600.0  # a push of a large image over a slow link


def docker_cli() -> str:
    return os.environ.get("IMGBUILD_DOCKER", "docker")


@dataclass(frozen=True)
class Manifest:
    """What `imagetools inspect --raw` gave for a reference: a manifest or an index."""

    ref: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def json(self) -> dict[str, object]:
        value = json.loads(self.data)
        return value if isinstance(value, dict) else {}

    @property
    def media_type(self) -> str:
        return str(self.json().get("mediaType") or "")

    @property
    def is_index(self) -> bool:
        body = self.json()
        return self.media_type in INDEX_TYPES or (not self.media_type and "manifests" in body)

    def entries(self) -> list[tuple[str | None, str]]:
        """An index's (platform, manifest digest) pairs, in order (platform None: an attestation or unknown)."""
        out = []
        for entry in self.json().get("manifests") or []:  # type: ignore[attr-defined]
            if isinstance(entry, dict):
                out.append((platform_of(entry), str(entry.get("digest"))))
        return out


def platform_of(entry: dict[str, object]) -> str | None:
    """`linux/arm64` from an index entry's platform (the arm64 `v8` variant is implied)."""
    plat = entry.get("platform")
    if not isinstance(plat, dict):
        return None
    os_, arch, var = plat.get("os"), plat.get("architecture"), plat.get("variant")
    if not os_ or not arch or os_ == "unknown":
        return None
    if var and not (arch == "arm64" and var == "v8"):
        return f"{os_}/{arch}/{var}"
    return f"{os_}/{arch}"


def _hint(stderr: str, host: str) -> str:
    low = stderr.lower()
    if "unauthorized" in low or "denied" in low or "authentication required" in low or "no basic auth" in low:
        return f"log in first: `docker login {host}` (imgbuild uses the docker config's credentials)"
    if "connection refused" in low or "no such host" in low or "i/o timeout" in low or "dial tcp" in low:
        return f"is the registry at {host} running and reachable from here?"
    if "http response to https client" in low:
        return f"{host} speaks plain HTTP: add it to the daemon's insecure-registries, or give it TLS"
    return "run the command above by hand (IMGBUILD_ECHO=1 prints it) to see the registry's answer"


def _tail(done: proc.CompletedProcess[str]) -> str:
    lines = [ln for ln in (done.stderr or done.stdout or "").strip().splitlines() if ln.strip()]
    return "\n".join(lines[-4:]) or f"exit {done.returncode}"


def _run(args: Sequence[str], what: str, host: str) -> proc.CompletedProcess[str]:
    argv = [docker_cli(), *args]
    try:
        done = proc.run(argv, text=True, timeout=TIMEOUT)
    except proc.ToolNotFound as exc:
        raise RegistryError(
            f"{what}: the docker CLI ({argv[0]}) is not installed", hint="install docker, or set IMGBUILD_DOCKER"
        ) from exc
    except proc.ToolTimeout as exc:
        raise RegistryError(f"{what}: {exc}", hint=f"is the registry at {host} answering?") from exc
    if done.returncode != 0:
        raise RegistryError(f"{what} failed (exit {done.returncode}):\n{_tail(done)}", hint=_hint(done.stderr, host))
    return done


def host_of(ref: str) -> str:
    return ref.split("/", 1)[0]


def push(local: str, target: str) -> str:
    """Tag the local image `local` as `target` (`host/repo:tag`), push it, and return the digest pushed."""
    _run(["tag", local, target], f"docker tag {local} {target}", host_of(target))
    done = _run(["push", target], f"docker push {target}", host_of(target))
    found = PUSHED.findall(done.stdout + done.stderr)
    if found:
        return str(found[-1])
    return inspect_required(target).digest  # a client that prints no digest line: ask the registry


def inspect(ref: str) -> Manifest | None:
    """The manifest or index `ref` names, or None when the registry does not have it."""
    argv = [docker_cli(), "buildx", "imagetools", "inspect", "--raw", ref]
    try:
        done = proc.run(argv, timeout=300)
    except proc.ToolNotFound as exc:
        raise RegistryError(
            f"cannot look up {ref}: the docker CLI ({argv[0]}) is not installed",
            hint="install docker and its buildx plugin, or set IMGBUILD_DOCKER",
        ) from exc
    except proc.ToolTimeout as exc:
        hint = f"is the registry at {host_of(ref)} answering?"
        raise RegistryError(f"cannot look up {ref}: {exc}", hint=hint) from exc
    if done.returncode == 0:
        return Manifest(ref, bytes(done.stdout))
    err = bytes(done.stderr).decode(errors="replace")
    if "not found" in err.lower() and "dial tcp" not in err.lower():
        return None
    tail = "\n".join(err.strip().splitlines()[-4:])
    raise RegistryError(f"docker buildx imagetools inspect {ref} failed:\n{tail}", hint=_hint(err, host_of(ref)))


def inspect_required(ref: str) -> Manifest:
    found = inspect(ref)
    if found is None:
        raise RegistryError(f"{ref} is not in the registry", hint="check the name and tag (and that it was pushed)")
    return found


def image_platform(ref: str) -> str:
    """The platform of the single image manifest `ref` names, from its config."""
    done = _run(
        ["buildx", "imagetools", "inspect", "--format", "{{json .Image}}", ref],
        f"docker buildx imagetools inspect {ref}",
        host_of(ref),
    )
    try:
        config = json.loads(done.stdout)
        os_, arch, var = config["os"], config["architecture"], config.get("variant")
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"{ref}: its config names no platform") from exc
    return f"{os_}/{arch}" + (f"/{var}" if var and not (arch == "arm64" and var == "v8") else "")


def copy_tag(source: str, target: str) -> None:
    """Point `target` at the index `source` (`host/repo@digest`) names, unchanged: one manifest write (a `docker
    push` of an index would write each platform's manifest under the tag first)."""
    _run(["buildx", "imagetools", "create", "-t", target, source], f"docker buildx imagetools create -t {target}",
         host_of(target))  # fmt: skip
