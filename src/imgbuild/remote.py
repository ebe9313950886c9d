"""Registry references for `smoke` and `inspect`: pull one platform by digest, then work locally.

`localize` resolves `host/repo:tag` (an index or one manifest) to the
platform's manifest digest with the registry client, pulls exactly that
digest through the daemon, and returns `host/repo@sha256:...`, which the
daemon then knows as a local image. Local names are returned unchanged.
"""

from __future__ import annotations

from imgbuild import reference
from imgbuild.docker_engine import Engine
from imgbuild.errors import ConfigError, DockerError, RegistryError
from imgbuild.lock import normalize_platform, platform_of
from imgbuild.registry import INDEX_TYPES, Registry


def is_registry_ref(text: str) -> bool:
    first, _, rest = text.partition("/")
    return bool(rest) and ("." in first or ":" in first or first == "localhost")


def platform_digest(ref: reference.Reference, platform: str, reg: Registry) -> str:
    """The manifest digest of `platform` behind `ref`."""
    top = reg.get_manifest(ref.repository, ref.ref)
    if top.media_type not in INDEX_TYPES:
        return top.digest
    want = normalize_platform(platform)
    found = []
    for entry in top.json().get("manifests") or []:  # type: ignore[attr-defined]
        plat = platform_of(entry)
        found.append(plat or "unknown")
        if plat == want:
            return str(entry["digest"])
    raise RegistryError(f"{ref} has no {platform} image (it has {', '.join(found) or 'none'})")


def localize(engine: Engine, text: str, platform: str | None = None) -> str:
    """A reference the daemon has: local names as they are, registry references pulled by digest."""
    local = engine.image(text)
    if local is not None and (platform is None or normalize_platform(local.platform) == normalize_platform(platform)):
        return text
    if not is_registry_ref(text):
        return text
    try:
        ref = reference.parse(text)
    except ConfigError:
        return text
    plat = platform or f"linux/{engine.arch}"
    with Registry(ref) as reg:
        digest = platform_digest(ref, plat, reg)
    pinned = f"{ref.name}@{digest}"
    if engine.image(pinned) is None:
        try:
            engine.pull(pinned, normalize_platform(plat))
        except DockerError as exc:
            raise DockerError(
                f"cannot pull {pinned} ({plat}) for checking: {exc.message}",
                hint="the daemon pulls with its own credentials: `docker login " + ref.host + "`",
            ) from exc
    return pinned
