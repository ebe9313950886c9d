"""Registry references for `smoke` and `inspect`: pull one platform by digest, then work locally.

`localize` resolves `host/repo:tag` (an index or one manifest) to the
platform's manifest digest with `docker buildx imagetools inspect`
(registry/tools.py), pulls exactly that
digest through the daemon, and returns `host/repo@sha256:...`, which the
daemon then knows as a local image. Local names are returned unchanged.
"""

from __future__ import annotations

from imgbuild.errors import ConfigError, DockerError, RegistryError
from imgbuild.images import labels as lbl
from imgbuild.images.docker import Engine
from imgbuild.registry import reference, tools
from imgbuild.registry.lock import normalize_platform


def is_registry_ref(text: str) -> bool:
    first, _, rest = text.partition("/")
    return bool(rest) and ("." in first or ":" in first or first == "localhost")


def platform_digest(ref: reference.Reference, platform: str) -> str:
    """The manifest digest of `platform` behind `ref`."""
    top = tools.inspect_required(str(ref))
    if not top.is_index:
        return top.digest
    want = normalize_platform(platform)
    found = []
    for plat, digest in top.entries():
        found.append(plat or "unknown")
        if plat is not None and normalize_platform(plat) == want:
            return digest
    raise RegistryError(f"{ref} has no {platform} image (it has {', '.join(found) or 'none'})")


def platform_name(engine: Engine, text: str, labels: dict[str, str], platform: str) -> str | None:
    """One platform of a local multi-platform image imgbuild built: `<version>-<inputs>-<arch>` names it.

    Docker 26 inspects an index as one platform only, so `build` names each one (multiplan.py).
    """
    inputs, version = labels.get(f"{lbl.PREFIX}inputs"), labels.get(f"{lbl.OCI}version")
    if not inputs or not version:
        return None
    try:
        ref = reference.parse(text)
    except ConfigError:
        return None
    named = str(ref.with_tag(f"{version}-{inputs[:12]}-{normalize_platform(platform).split('/')[1]}"))
    info = engine.image(named)
    return named if info is not None and normalize_platform(info.platform) == normalize_platform(platform) else None


def localize(engine: Engine, text: str, platform: str | None = None) -> str:
    """A reference the daemon has: local names as they are, registry references pulled by digest."""
    local = engine.image(text)
    if local is not None and (platform is None or normalize_platform(local.platform) == normalize_platform(platform)):
        return text
    if local is not None and platform is not None:
        named = platform_name(engine, text, local.labels, platform)
        if named is not None:
            return named
    if not is_registry_ref(text):
        return text
    try:
        ref = reference.parse(text)
    except ConfigError:
        return text
    plat = platform or f"linux/{engine.arch}"
    digest = platform_digest(ref, plat)
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
