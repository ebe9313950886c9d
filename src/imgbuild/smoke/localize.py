"""The image references `smoke` takes: a local name as it is, a registry one pulled by the platform's digest."""

from __future__ import annotations

from imgbuild.engine import Engine
from imgbuild.errors import ConfigError, DockerError, RegistryError
from imgbuild.platforms import Platform
from imgbuild.registry import reference, tools


def is_registry_ref(text: str) -> bool:
    first, _, rest = text.partition("/")
    return bool(rest) and ("." in first or ":" in first or first == "localhost")


def localize(engine: Engine, text: str, platform: str | None = None) -> str:
    """A reference the daemon has for `platform` (default: the daemon's); a registry one pulled by digest."""
    want = Platform.parse(platform) if platform else None
    local = engine.image(text)
    if local is not None and (want is None or local.platform == want):
        return text
    if not is_registry_ref(text):
        if local is not None and want is not None:
            raise DockerError(
                f"{text} in the local store is {local.platform}, not {want}",
                hint="name that platform's own image: `imgbuild build --json` lists each platform's immutable tag",
            )
        return text
    try:
        ref = reference.parse(text)
    except ConfigError:
        return text
    plat = want or engine.arch
    top = tools.inspect_required(str(ref))  # the platform's manifest: the one, or the index's entry
    found = [digest for p, digest in top.entries() if p == str(plat)] if top.is_index else [top.digest]
    if not found:
        have = ", ".join(p or "unknown" for p, _ in top.entries()) or "none"
        raise RegistryError(f"{ref} has no {plat} image (it has {have})")
    pinned = f"{ref.name}@{found[0]}"
    if engine.image(pinned) is None:
        try:
            engine.pull(pinned, plat)
        except DockerError as exc:
            raise DockerError(
                f"cannot pull {pinned} ({plat}) for checking: {exc.message}",
                hint="the daemon pulls with its own credentials: `docker login " + ref.host + "`",
            ) from exc
    return pinned
