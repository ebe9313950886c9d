"""Image references as docker spells them (pure).

`[host[:port]/]path[:tag][@sha256:hex]`: the first component is a registry
host when it has a dot or a colon or is `localhost`; otherwise the registry is
Docker Hub and a one-component path gets `library/`. Loopback registries speak
plain HTTP (docker treats 127.0.0.0/8 and localhost as insecure; cosign needs
telling, publish/signing.py); every other registry is HTTPS.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from imgbuild.errors import ConfigError

DOCKER_HUB = "docker.io"

_PATH = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_HOST = re.compile(r"^(?:\[[0-9a-fA-F:]+\]|[a-zA-Z0-9.-]+)(?::[0-9]+)?$")


@dataclass(frozen=True)
class Reference:
    host: str  # "docker.io" for Docker Hub
    repository: str  # e.g. "library/debian", "vllm/vllm-openai"
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """host/repository, the part before the tag."""
        return f"{self.host}/{self.repository}"

    @property
    def ref(self) -> str:
        """The tag or digest to ask the registry for (digest wins)."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1 : host.index("]")]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse(text: str) -> Reference:
    """Parse an image reference; raise ConfigError naming what is wrong."""
    rest = text.strip()
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.match(digest):
            raise ConfigError(f"image reference {text!r}: {digest!r} is not a sha256 digest")
    host = DOCKER_HUB
    first, _, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        if not _HOST.match(first):
            raise ConfigError(f"image reference {text!r}: bad registry host {first!r}")
        host, rest = first, remainder
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.match(tag):
            raise ConfigError(f"image reference {text!r}: bad tag {tag!r}")
    if host in (DOCKER_HUB, "index.docker.io"):
        host = DOCKER_HUB
        if "/" not in rest:
            rest = f"library/{rest}"
    if not _PATH.match(rest):
        raise ConfigError(
            f"image reference {text!r}: bad repository name {rest!r}",
            hint="repository names are lowercase letters, digits and . _ - separated by /",
        )
    return Reference(host=host, repository=rest, tag=tag, digest=digest)


def join(registry: str, repository: str, tag: str | None = None) -> Reference:
    """`registry` (a host, optionally with a path prefix) + `repository`."""
    registry = registry.rstrip("/")
    return parse(f"{registry}/{repository}" + (f":{tag}" if tag else ""))
