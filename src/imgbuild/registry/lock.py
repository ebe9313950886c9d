"""`images.lock`: each variant's base resolved to a digest per platform (`imagetools inspect`), with the
upstream pin and series digest; rendering is deterministic (an unchanged lock is rewritten byte-equal)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import yaml

from imgbuild.atomic import write_text
from imgbuild.errors import ConfigError, RegistryError
from imgbuild.patches.variants import ResolvedVariant
from imgbuild.platforms import Platform
from imgbuild.registry import tools
from imgbuild.shapes import derived, dump, named, omitted_unless_set

FILENAME = "images.lock"
VERSION = 1
HEADER = (
    "# images.lock: each variant's base image by digest, per platform, and the inputs it was locked with.\n"
    "# Written by `imgbuild lock`; `imgbuild lock --check` fails when it is stale. Do not edit by hand.\n"
)


@dataclass(frozen=True)
class LockedBase:
    ref: str  # as written in images/*.yaml
    digest: str  # what the tag pointed to: an index, or a single manifest
    media_type: str
    platforms: tuple[tuple[Platform, str], ...]  # (platform, manifest digest), sorted as written

    def pinned(self, platform: Platform | None = None) -> str:
        """`ref:tag@digest` (docker uses the digest): the index's, or one platform's manifest's."""
        digest = self.digest if platform is None else dict(self.platforms)[platform]
        return f"{self.ref.split('@', 1)[0]}@{digest}"


@dataclass(frozen=True)
class LockedVariant:
    base: str
    platforms: tuple[Platform, ...]


@dataclass(frozen=True)
class ImagesLock:
    """`images.lock`: the pinned release, the series, each base's digest per platform and each variant's base."""

    upstream_tag: str
    upstream_commit: str
    series: str
    bases: Mapping[str, LockedBase]
    variants: Mapping[str, LockedVariant]
    more: tuple[tuple[str, str, str], ...] = ()  # every further pin: (name, tag, commit); written only when there are

    def file(self) -> LockFile:
        """The lock as written to images.lock (and printed by `lock --json`)."""
        also = [AlsoPinned(n, t, c) for n, t, c in self.more] if self.more else None
        return LockFile(
            VERSION,
            LockUpstream(self.upstream_tag, self.upstream_commit, also),
            self.series,
            {
                ref: BaseEntry(b.digest, b.media_type, {str(p): d for p, d in b.platforms})
                for ref, b in sorted(self.bases.items())
            },
            {name: VariantEntry(v.base, [str(p) for p in v.platforms]) for name, v in sorted(self.variants.items())},
        )

    def written(self, changed: bool) -> LockWritten:
        """What `imgbuild lock --json` prints: the lock, and whether images.lock changed."""
        return LockWritten(changed, self.file())

    def render(self) -> str:
        return HEADER + yaml.safe_dump(dump(self.file()), sort_keys=False, default_flow_style=False, width=200)


# -- images.lock as written ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AlsoPinned:
    name: str
    tag: str
    commit: str


@dataclass(frozen=True)
class LockUpstream:
    tag: str
    commit: str
    also: Annotated[list[AlsoPinned] | None, omitted_unless_set("the other pins, when there are several")] = None


@named("LockedBase")
@dataclass(frozen=True)
class BaseEntry:
    digest: str
    media_type: str
    platforms: dict[str, str]


@named("LockedVariant")
@dataclass(frozen=True)
class VariantEntry:
    base: str
    platforms: list[str]


@dataclass(frozen=True)
class LockFile:
    version: int
    upstream: LockUpstream
    series: str
    bases: dict[str, BaseEntry]
    variants: dict[str, VariantEntry]


@dataclass(frozen=True)
class LockWritten:
    """`imgbuild lock --json`: images.lock as written"""

    changed: bool
    lock: LockFile


def load_lock(root: Path) -> ImagesLock | None:
    path = root / FILENAME
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text())
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} lock")
        bases = {
            str(ref): LockedBase(str(ref), str(b["digest"]), str(b["media_type"]),
                                 _sorted((Platform.read(str(p)), str(d)) for p, d in b["platforms"].items()))
            for ref, b in (data.get("bases") or {}).items()
        }  # fmt: skip
        variants = {
            str(name): LockedVariant(str(v["base"]), tuple(Platform.read(str(p)) for p in v["platforms"]))
            for name, v in (data.get("variants") or {}).items()
        }
        up = data["upstream"]
        more = tuple((str(a["name"]), str(a["tag"]), str(a["commit"])) for a in up.get("also") or ())
        return ImagesLock(str(up["tag"]), str(up["commit"]), str(data["series"]), bases, variants, more)
    except (yaml.YAMLError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: cannot read the lock: {exc}", hint="regenerate it with `imgbuild lock`") from exc


def _sorted(platforms: Iterable[tuple[Platform, str]]) -> tuple[tuple[Platform, str], ...]:
    """In the order of their text, as the lock writes them."""
    return tuple(sorted(platforms, key=lambda pd: (str(pd[0]), pd[1])))


def resolve_base(ref_text: str) -> LockedBase:
    """Ask the base's registry what `ref_text` points to, per platform (`imagetools inspect`)."""
    top = tools.inspect_required(ref_text)
    if top.is_index:
        # the first entry of a platform wins (reversed: a later key would overwrite it)
        platforms = {p: d for p, d in reversed(top.entries()) if p is not None}
    else:
        platforms = {tools.image_platform(ref_text): top.digest}
    return LockedBase(ref_text, top.digest, top.media_type, _sorted(platforms.items()))


def make_lock(
    variants: Sequence[ResolvedVariant],
    upstream_tag: str,
    upstream_commit: str,
    series: str,
    resolve: Callable[[str], LockedBase] = resolve_base,
    more: Sequence[tuple[str, str, str]] = (),
) -> ImagesLock:
    """`more`: every further pin (name, tag, commit), so that a move of any pin makes the lock stale."""
    bases = {ref: resolve(ref) for ref in dict.fromkeys(v.base_ref() for v in variants)}
    locked = {v.name: LockedVariant(v.base_ref(), v.image.platforms) for v in variants}
    lock = ImagesLock(upstream_tag, upstream_commit, series, bases, locked, tuple(more))
    missing = missing_platforms(lock)
    if missing:
        raise RegistryError(
            "; ".join(missing), hint="the base is not published for that platform; change image.platforms"
        )
    return lock


def missing_platforms(lock: ImagesLock) -> list[str]:
    out = []
    for name, v in sorted(lock.variants.items()):
        base = lock.bases.get(v.base)
        have = {p for p, _ in base.platforms} if base else set()
        for p in v.platforms:
            if p not in have:
                has = ", ".join(sorted(map(str, have))) or "none"
                out.append(f"variant {name}: base {v.base} has no {p} image in the lock (has {has})")
    return out


@dataclass(frozen=True)
class LockChecked:
    """`lock --check`: what makes images.lock stale (`check`, and the runtime locks); `ok`: nothing."""

    ok: bool = derived()
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", not self.problems)


def check(
    lock: ImagesLock | None,
    variants: Sequence[ResolvedVariant],
    upstream_tag: str,
    upstream_commit: str,
    series: str,
    resolve: Callable[[str], LockedBase] | None = resolve_base,
    more: Sequence[tuple[str, str, str]] = (),
) -> list[str]:
    """Problems that make the lock stale (any pin moved: `more` are the further pins); `resolve=None` checks
    offline."""
    if lock is None:
        return [f"{FILENAME} is missing; run `imgbuild lock`"]
    problems = []
    if lock.upstream_commit != upstream_commit or lock.upstream_tag != upstream_tag:
        problems.append(
            f"upstream: locked {lock.upstream_tag} {lock.upstream_commit[:12]}, "
            f"pinned {upstream_tag} {upstream_commit[:12]}"
        )
    problems += _more_pins(lock, more)
    if lock.series != series:
        problems.append(f"series: locked {lock.series[:12]}, now {series[:12]} (patches/ changed)")
    names = {v.name for v in variants}
    for extra in sorted(set(lock.variants) - names):
        problems.append(f"variant {extra}: locked but no longer in images/")
    for v in variants:
        entry = lock.variants.get(v.name)
        if entry is None:
            problems.append(f"variant {v.name}: not in the lock")
            continue
        base = v.base_ref()
        if entry.base != base:
            problems.append(f"variant {v.name}: locked base {entry.base}, images/ says {base}")
        want = v.image.platforms
        if entry.platforms != want:
            problems.append(
                f"variant {v.name}: locked platforms {', '.join(map(str, entry.platforms))}, "
                f"images/ says {', '.join(map(str, want))}"
            )
    problems += missing_platforms(lock)
    if resolve is not None:
        for ref, locked in sorted(lock.bases.items()):
            now = resolve(ref)
            if now.digest != locked.digest:
                problems.append(f"base {ref}: locked {locked.digest}, the registry now has {now.digest}")
            elif now.platforms != locked.platforms:
                problems.append(f"base {ref}: its platforms changed in the registry")
    return problems


def _more_pins(lock: ImagesLock, more: Sequence[tuple[str, str, str]]) -> list[str]:
    """Every further pin against the lock's."""
    problems = []
    locked = {n: (t, c) for n, t, c in lock.more}
    for name, tag, commit in more:
        was = locked.pop(name, None)
        if was is None:
            problems.append(f"upstream {name}: not in the lock, pinned {tag} {commit[:12]}")
        elif was != (tag, commit):
            problems.append(f"upstream {name}: locked {was[0]} {was[1][:12]}, pinned {tag} {commit[:12]}")
    return problems + [f"upstream {name}: locked {t}, no longer pinned" for name, (t, _) in sorted(locked.items())]


def write_lock(root: Path, lock: ImagesLock) -> bool:
    """Write `images.lock`; False when it already had exactly this content."""
    path = root / FILENAME
    text = lock.render()
    if path.is_file() and path.read_text() == text:
        return False
    write_text(path, text)
    return True
