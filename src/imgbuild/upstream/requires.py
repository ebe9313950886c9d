"""Pins that depend on each other (pure): each pinned release's own requirements (its wheel's `Requires-Dist`),
checked against the other pins: vLLM 0.34.0 requires `flashinfer-python==0.7.3`, and the FlashInfer pin is
0.7.2.post1. An `override:` on the required pin (patches/upstream.yaml) replaces one such requirement, with its
reason; an override that replaces nothing is stale."""

from __future__ import annotations

import email.parser
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imgbuild.config.models import PinOverride, ShownOverride, UpstreamPin, WheelSource
from imgbuild.shapes import named

Status = Literal["ok", "overridden", "mismatch"]
DISPLAY = {"vllm": "vLLM"}  # how the messages spell a pin's release ("vLLM 0.34.0 requires ...")


def metadata_requires(metadata: bytes) -> tuple[str, ...]:
    """The `Requires-Dist` lines of a wheel's `METADATA` file, as written."""
    msg = email.parser.BytesParser().parsebytes(metadata, headersonly=True)
    return tuple(str(v).strip() for v in msg.get_all("Requires-Dist") or ())


def environment(source: WheelSource) -> dict[str, str]:
    """The marker environment a wheel's requirements are read for: its platform's machine, its Python, no extra."""
    machine = source.platform.rsplit("_", 1)[-1] if "_" in source.platform else source.platform
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return {
        "python_version": source.python_version,
        "python_full_version": f"{source.python_version}.0",
        "platform_machine": machine,
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def applies(requirement: Requirement, env: Mapping[str, str]) -> bool:
    """Whether a requirement holds for `env` (no marker, or a marker that evaluates true; extras never)."""
    if requirement.marker is None:
        return True
    try:
        return requirement.marker.evaluate(dict(env))
    except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
        return True  # a marker we cannot judge: keep the requirement, so a mismatch is never hidden


@dataclass(frozen=True)
class Need:
    """One pin's release requires another pin's project."""

    by: str  # the requiring pin's name
    by_version: str  # its release
    requirement: str  # as its wheel spells it (marker dropped)
    pin: str  # the pin of the required project
    project: str  # that pin's project (canonical name)
    pinned: str  # that pin's release
    status: Status
    override: PinOverride | None = None  # the pin's override, when it names this requirement

    @property
    def ok(self) -> bool:
        return self.status != "mismatch"

    @property
    def message(self) -> str:
        who = f"{DISPLAY.get(self.by, self.by)} {self.by_version} requires {self.requirement}"
        o = self.override
        if self.status == "overridden" and o is not None:
            return f"{who}; overridden: the {self.pin} pin is {self.pinned} (patches/upstream.yaml: {o.reason})"
        text = f"{who}; the {self.pin} pin is {self.pinned}"
        if self.status == "mismatch" and o is not None:
            text += f" (its override names {o.version}, the pin does not have it yet)"
        return text

    def shown(self) -> ShownNeed:
        """The requirement as the `--json` documents print it."""
        return ShownNeed(
            self.by,
            self.by_version,
            self.requirement,
            self.pin,
            self.project,
            self.pinned,
            self.status,
            self.override.shown() if self.override else None,
            self.message,
        )


@named("Requirement")
@dataclass(frozen=True)
class ShownNeed:
    """What one pinned release requires of another pin (its wheel's Requires-Dist): met (ok), replaced by an
    override in patches/upstream.yaml (overridden), or not (mismatch)."""

    by: str
    by_version: str
    requirement: str
    pin: str
    project: str
    pinned: str
    status: Status
    override: ShownOverride | None
    message: str


def satisfies(version: str, requirement: Requirement) -> bool:
    try:
        return requirement.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def needs(pins: Sequence[UpstreamPin], requires: Mapping[str, Sequence[str]]) -> list[Need]:
    """Every requirement of a pin's release (`requires`: pin name -> its Requires-Dist) on another pin's project,
    with whether that pin meets it, is overridden, or does not."""
    by_project = {canonicalize_name(p.source.project): p for p in pins if isinstance(p.source, WheelSource)}
    out: list[Need] = []
    for pin in pins:
        if not isinstance(pin.source, WheelSource):
            continue
        env = environment(pin.source)
        for line in requires.get(pin.name, ()):
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            other = by_project.get(canonicalize_name(req.name))
            if other is None or other.name == pin.name or not applies(req, env):
                continue
            spelled = f"{req.name}{req.specifier}"
            o = other.override
            named = o if o is not None and o.replaces(spelled) else None
            status: Status
            if satisfies(other.version, req):
                status = "ok"
            elif named is not None and named.version == other.version:
                status = "overridden"
            else:
                status = "mismatch"
            out.append(
                Need(
                    pin.name,
                    pin.version,
                    spelled,
                    other.name,
                    canonicalize_name(req.name),
                    other.version,
                    status,
                    named,
                )
            )
    return out


def stale_overrides(pins: Iterable[UpstreamPin], found: Sequence[Need]) -> list[str]:
    """Overrides that replace no requirement any pin has now: each would override silently, so each is a problem."""
    used = {(n.pin, n.override.requirement) for n in found if n.override is not None and n.status == "overridden"}
    out = []
    for pin in pins:
        o = pin.override
        if o is None or (pin.name, o.requirement) in used:
            continue
        now = [n.message for n in found if n.pin == pin.name]
        why = f"; now: {'; '.join(now)}" if now else "; no pinned release requires it now"
        out.append(
            f"the {pin.name} pin's override of {o.requirement} (to {o.version}) replaces nothing{why}: "
            "remove it from patches/upstream.yaml"
        )
    return out


def problems(pins: Sequence[UpstreamPin], found: Sequence[Need]) -> list[str]:
    """What `patches check` fails on: every mismatch, every stale override."""
    return [n.message for n in found if not n.ok] + stale_overrides(pins, found)


def overrides_in_effect(found: Sequence[Need]) -> list[str]:
    """uv's `--override` lines for the overrides in effect (`project==version`), sorted."""
    return sorted({f"{n.project}=={n.override.version}" for n in found if n.status == "overridden" and n.override})


@dataclass(frozen=True)
class PinMove:
    """A pin that moves with the pin that requires it (`patches bump`)."""

    pin: str
    old: str  # its pinned version
    new: str  # the version it moves to
    need: Need  # the requirement that moves it (as the new release has it)
    by_override: bool = False  # `new` is the override's version (the index has nothing that meets the requirement)
    drop_override: bool = False  # the pin's override replaces nothing any more: the bump removes it

    @property
    def message(self) -> str:
        how = (
            f"the override's {self.new} ({self.need.override.reason})"
            if self.by_override and self.need.override
            else self.new
        )
        text = f"the {self.pin} pin moves {self.old} -> {how}: {self.need.requirement} (required by "
        text += f"{DISPLAY.get(self.need.by, self.need.by)} {self.need.by_version})"
        return text + ("; its override is dropped" if self.drop_override else "")

    def shown(self) -> PlannedMove:
        """The move as `patches bump --json` prints it at a stop (and its report holds it)."""
        override = self.need.override.shown() if self.by_override and self.need.override else None
        required_by = f"{self.need.by} {self.need.by_version}"
        return PlannedMove(
            self.pin, self.old, self.new, self.need.requirement, required_by, override, self.drop_override, self.message
        )


@named("PlannedPinMove")
@dataclass(frozen=True)
class PlannedMove:
    """At a stop: a pin that will move with the bump (what the new release requires of it)."""

    pin: str
    old: str
    new: str
    requirement: str
    required_by: str
    override: ShownOverride | None
    drop_override: bool
    message: str


class Unmet(Exception):
    """A requirement no version on the index meets, and no override replaces: `patches bump` stops on it."""

    def __init__(self, need: Need, versions: Sequence[str], override: PinOverride | None) -> None:
        self.need, self.versions, self.override = need, list(versions), override
        shown = ", ".join(versions[:12]) + (", ..." if len(versions) > 12 else "")
        super().__init__(
            f"{DISPLAY.get(need.by, need.by)} {need.by_version} requires {need.requirement}; the {need.pin} pin is "
            f"{need.pinned}, and the package index has no release that meets it (it has: {shown or 'none'})"
            + (f"; the {need.pin} pin's override names {override.version}, which it lacks" if override else "")
        )


def plan_moves(
    pins: Sequence[UpstreamPin], found: Sequence[Need], versions: Callable[[UpstreamPin], Sequence[str]]
) -> list[PinMove]:
    """Which pins move with a bump, and where to (pure but for `versions`, the index's versions of a pin's project):
    an unmet requirement moves its pin to the newest version on the index that meets it (dropping an override that
    replaced an older requirement), else to the version of an override that replaces exactly this requirement
    (which the index must have); otherwise `Unmet` is raised, before anything changed."""
    by_name = {p.name: p for p in pins}
    moves: list[PinMove] = []
    for need in found:
        pin = by_name[need.pin]
        stale = pin.override is not None and need.override is None  # it named an older requirement
        if need.status == "ok":
            if stale:  # met by the pin as it is: only the stale override goes
                moves.append(PinMove(pin.name, need.pinned, need.pinned, need, drop_override=True))
            continue
        have = list(versions(pin))
        req = Requirement(need.requirement)
        meeting = sorted((v for v in have if satisfies(v, req)), key=Version)
        if need.status == "overridden":  # the override stays until the index has what is required
            if meeting:
                moves.append(PinMove(pin.name, need.pinned, meeting[-1], need, drop_override=True))
            continue
        if meeting:
            moves.append(PinMove(pin.name, need.pinned, meeting[-1], need, drop_override=pin.override is not None))
        elif need.override is not None and need.override.version in have:
            moves.append(PinMove(pin.name, need.pinned, need.override.version, need, by_override=True))
        else:
            raise Unmet(need, have, need.override)
    return moves
