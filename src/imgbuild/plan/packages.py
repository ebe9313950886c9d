"""The base's packages against the pins (pure): each wheel pin's project, and its companions, at the version the
base's `*.dist-info` names: a `Carried` per package, which says whether it is the pin's and why the pin is what it
is.

The drift check (builder/bases.py) compares files; this names the package and both versions first, so a base
whose FlashInfer is not the pin (the stock vLLM image carries the version its vLLM requires) is refused with the
versions and the reason, not a list of file hashes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import Field

from imgbuild.config.models import UpstreamPin, WheelSource
from imgbuild.shapes import EmptyIsNull


@dataclass(frozen=True)
class Carried:
    """A pinned package (a wheel pin's project, or a companion of one) as a base carries it."""

    package: str  # the project, canonical
    base_version: str | None  # None: the base has no *.dist-info for it
    pinned: str
    pin: str  # the pin's name in patches/upstream.yaml
    why: str  # why the pin is at `pinned`: its override and reason, or the pin itself
    companion_of: str | None = None  # the pin's own project, for a companion

    @property
    def agrees(self) -> bool:
        """Whether the base is at the pin; a package without dist-info is not judged here (a stand-in without
        metadata): the drift check compares its files."""
        return self.base_version is None or same_release(self.base_version, self.pinned)

    def say(self) -> str:
        have = self.base_version or "no *.dist-info"
        what = f"{self.package} (released with {self.companion_of})" if self.companion_of else self.package
        if self.agrees:
            return f"{what}: the base has {have}, the stack pins {self.pinned}"
        return f"{what}: the base has {have}, the stack pins {self.pinned}: {self.why}"

    def shown(self) -> CarriedPackage:
        """The package as `plan --bases --json` prints it."""
        return CarriedPackage(
            self.package, self.base_version, self.pinned, self.pin, self.why, self.companion_of, self.agrees
        )


@dataclass(frozen=True)
class CarriedPackage:
    package: str
    base_version: Annotated[str | None, Field(description="the base's version by its *.dist-info; null: it has none")]
    pinned: str
    pin: str
    why: Annotated[str, Field(description="why the pin is at `pinned`: its override and reason, or the pin")]
    companion_of: Annotated[str | None, Field(description="the pin's own project, for a companion released with it")]
    agrees: Annotated[
        bool,
        Field(description="the base is at the pin (or has no dist-info for it); false: a build refuses it"),
    ]


@dataclass(frozen=True)
class PlanBase:
    ref: str
    variants: list[str]
    platform: str | None
    image_id: str | None
    packages: list[CarriedPackage]
    unread: Annotated[
        EmptyIsNull,
        Field(description="why the base was not read (not in the local image store...); null: read"),
    ]


def why_pinned(pin: UpstreamPin) -> str:
    assert isinstance(pin.source, WheelSource)
    if pin.override is not None:
        o = pin.override
        return f"patches/upstream.yaml overrides {o.requirement} with {o.version} because {o.reason}"
    return f"patches/upstream.yaml pins {pin.name} {pin.tag}, and the stack's patches apply to that release"


def carried(pins: Sequence[UpstreamPin], packages: Mapping[str, str]) -> list[Carried]:
    """Each wheel pin's project, and each companion the base has, against `packages` (canonical project name ->
    version, from the base's dist-info)."""
    out = []
    for pin in pins:
        if not isinstance(pin.source, WheelSource):
            continue
        own = canonicalize_name(pin.source.project)
        for name in (own, *(canonicalize_name(c) for c in pin.companions)):
            if name != own and name not in packages:
                continue  # a companion the base does not have
            companion = None if name == own else own
            out.append(Carried(name, packages.get(name), pin.source.version, pin.name, why_pinned(pin), companion))
    return out


def mismatches(pins: Sequence[UpstreamPin], packages: Mapping[str, str]) -> list[Carried]:
    """What `carried` finds not at the pin."""
    return [c for c in carried(pins, packages) if not c.agrees]


def same_release(have: str, pinned: str) -> bool:
    """Equal public versions: a local label (`0.34.0+cu130`, how a build from source may name itself) is the same
    release; the drift check still compares the files."""
    try:
        return Version(have).public == Version(pinned).public
    except InvalidVersion:
        return have == pinned


def message(ref: str, found: Sequence[Carried]) -> tuple[str, str]:
    """The error's message and hint for `found` on base `ref`."""
    lines = "\n  ".join(m.say() for m in found)
    text = f"base {ref} does not carry the pinned packages; nothing was built:\n  {lines}"
    hint = (
        "use a base that has the pinned versions (`--base runtime` builds one from images/runtime-lock), or re-pin "
        "patches/upstream.yaml to the base's versions (`imgbuild patches check --onto` the release, then "
        "`imgbuild patches bump`); the stock image carries what its own vLLM requires (docs/building-images.md, "
        "The base's packages)"
    )
    return text, hint
