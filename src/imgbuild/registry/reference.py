"""Image references as docker spells them (pure), split by the docker SDK and each part checked."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from docker.auth import INDEX_NAME, split_repo_name
from docker.utils import parse_repository_tag

from imgbuild.errors import ConfigError

DOCKER_HUB = INDEX_NAME  # "docker.io"

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

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1 : host.index("]")]
    try:
        return name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse(text: str) -> Reference:
    """Parse an image reference; raise ConfigError naming what is wrong."""
    rest, at, digest = text.strip().partition("@")
    if at and not _DIGEST.match(digest):
        raise ConfigError(f"image reference {text!r}: {digest!r} is not a sha256 digest")
    name, tag = parse_repository_tag(rest)
    if tag is not None and not _TAG.match(tag):
        raise ConfigError(f"image reference {text!r}: bad tag {tag!r}")
    host, path = split_repo_name(name)
    if host in (DOCKER_HUB, "index.docker.io"):
        host, path = DOCKER_HUB, path if "/" in path else f"library/{path}"
    elif not _HOST.match(host):
        raise ConfigError(f"image reference {text!r}: bad registry host {host!r}")
    if not _PATH.match(path):
        raise ConfigError(
            f"image reference {text!r}: bad repository name {path!r}",
            hint="repository names are lowercase letters, digits and . _ - separated by /",
        )
    return Reference(host=host, repository=path, tag=tag, digest=digest or None)


def join(registry: str, repository: str, tag: str | None = None) -> Reference:
    """`registry` (a host, optionally with a path prefix) + `repository`."""
    return parse(f"{registry.rstrip('/')}/{repository}" + (f":{tag}" if tag else ""))
