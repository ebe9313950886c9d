"""The image references `smoke` takes: a local name as it is, a registry one pulled by the platform's digest."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from imgbuild.engine import Engine
from imgbuild.errors import ConfigError, DockerError, RegistryError
from imgbuild.patches.variants import ResolvedVariant
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
    plat = want or engine.platform
    top = tools.inspect_required(str(ref))  # the platform's manifest: the one, or the index's entry
    found = [digest for p, digest in top.entries() if p == plat] if top.is_index else [top.digest]
    if not found:
        have = ", ".join(str(p or "unknown") for p, _ in top.entries()) or "none"
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


def nowhere(target: str, variants: Mapping[str, ResolvedVariant] | None, repository: str | None = None) -> DockerError:
    """The error for a smoke target that is no variant and no local image: the variants there are, and how to get
    the image (which variant builds it, a typo's likely variant, a pull). `variants` None: no project here."""
    if variants is None:
        return DockerError(
            f"{target!r} is not an image in the local store, and there is no project here to name a variant of",
            hint=f"pull it first (`docker pull {target}`), name it by registry (host/repo:tag: smoke fetches it), "
            "or name a variant of a project: `imgbuild -C PROJECT smoke VARIANT`",
        )
    names = sorted(variants)
    what = f"{target!r} is neither a variant of this project ({', '.join(names) or 'none'}) nor an image in the "
    what += "local store"
    repo, _, tag = target.rpartition(":") if ":" in target.rsplit("/", 1)[-1] else (target, "", "")
    same_repo = [v for v in variants.values() if (repository or v.image.repository) == repo]
    makers = sorted(same_repo, key=lambda v: tag not in v.image.tags)  # the variant with that moving tag first
    if makers:
        name = makers[0].name
        how = f"`imgbuild build {name}` makes it (images/{name}.yaml), then `imgbuild smoke {name}`"
    elif close := difflib.get_close_matches(target, names, n=1, cutoff=0.6):
        how = f"did you mean the variant {close[0]!r}? `imgbuild smoke {close[0]}` checks its current image"
    else:
        how = f"name a variant (`imgbuild smoke {names[0] if names else 'VARIANT'}`) or build it first"
    return DockerError(
        what,
        hint=f"{how}; an image from elsewhere: `docker pull {target}` first, or name it by "
        "registry (host/repo:tag), which smoke fetches",
    )
