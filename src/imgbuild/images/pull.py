"""Image references for `smoke` and `inspect`: local names as they are, registry references pulled.

A registry reference (`host/repo:tag`) is pulled by the engine for the one
platform asked (`docker pull --platform`, which picks it out of an index), and
then named by the digest the engine reports, so the check reads exactly what
was pulled. A local name whose platform is not the one asked is refused with
the name to use instead: each platform of an imgbuild image has its own
immutable tag.
"""

from __future__ import annotations

from imgbuild.errors import DockerError
from imgbuild.images.docker import Engine
from imgbuild.platforms import Platform
from imgbuild.registry import reference


def is_registry_ref(text: str) -> bool:
    first, _, rest = text.partition("/")
    return bool(rest) and ("." in first or ":" in first or first == "localhost")


def localize(engine: Engine, text: str, platform: str | None = None) -> str:
    """A reference the daemon has, for `platform` (default: the daemon's own)."""
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
        info = engine.pull(text, want or engine.arch)
    except DockerError as exc:
        raise DockerError(
            f"cannot pull {text} ({want or engine.arch}) for checking: {exc.message}",
            hint="the daemon pulls with its own credentials: `docker login " + text.partition("/")[0] + "`",
        ) from exc
    digest = info.registry_digest
    return f"{reference.parse(text).name}@{digest}" if digest else info.id
