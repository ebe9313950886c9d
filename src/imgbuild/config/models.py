"""Typed models of `patches/upstream.yaml` (the pins) and `images/<variant>.yaml`: frozen, unknown keys refused,
loaded through yamlsrc so that errors carry file:line:col."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from imgbuild.config.yamlsrc import load_yaml, validate
from imgbuild.errors import ConfigError
from imgbuild.platforms import KNOWN, Platform, is_known
from imgbuild.shapes import named

HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
NAME = r"^[a-z0-9][a-z0-9._-]*$"


def _platform(value: object) -> Platform:
    """A platform in images/: parsed once, here (`Platform.parse`); a ValueError becomes the file:line:col error."""
    if isinstance(value, Platform):
        return value
    if not isinstance(value, str) or not is_known(value):
        raise ValueError(f"unsupported platform {value!r}; known: {', '.join(KNOWN)}")
    return Platform.parse(value)


# A `Platform` in a config model: read from its string, written (model_dump, JSON) as that string.
PlatformField = Annotated[
    Platform, PlainValidator(_platform), PlainSerializer(str, return_type=str), WithJsonSchema({"type": "string"})
]


def _platforms(value: object) -> object:
    """A list of platforms parsed as one value, so that an error names the list's own file:line:col."""
    return [_platform(p) for p in value] if isinstance(value, list) else value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class GitSource(Strict):
    """A git repository: an https URL, a file:// URL or a local path."""

    kind: Literal["git"]
    url: str


class WheelSource(Strict):
    """A release wheel from the package index, or a local file."""

    kind: Literal["wheel"]
    project: str
    version: str
    platform: str = "manylinux_2_28_aarch64"
    python_version: str = "3.12"
    filename: str
    sha256: Annotated[str, Field(pattern=HEX64.pattern)]
    url: str | None = Field(
        default=None,
        description="local path or file:// URL of the wheel; default: download with pip",
    )


class PinOverride(Strict):
    """Another pin's requirement on this pin's project, replaced by `version` (written down with its reason): e.g.
    vLLM 0.34.0 requires `flashinfer-python==0.7.3`, which the package index lacks, so the FlashInfer pin takes
    0.7.4. Shown by `plan`, recorded in the image labels and the bump report, passed to uv's `--override`."""

    requirement: str = Field(description="the requirement as the requiring release's wheel metadata spells it")
    version: str = Field(description="the release of this pin's project that replaces it")
    reason: str = Field(description="why (e.g. the required version is not on the index)")

    @field_validator("requirement")
    @classmethod
    def _requirement(cls, value: str) -> str:
        try:
            req = Requirement(value)
        except InvalidRequirement as exc:
            raise ValueError(f"not a requirement ({exc})") from None
        if not req.specifier:
            raise ValueError(f"{value!r} names no version (write it as the wheel's metadata does, e.g. name==1.2.3)")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a release version") from None
        return value

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an override needs its reason")
        return value.strip()

    @property
    def project(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)

    def replaces(self, requirement: str) -> bool:
        """Whether `requirement` (as a requiring wheel spells it) is the one this override names."""
        try:
            mine, theirs = Requirement(self.requirement), Requirement(requirement)
        except InvalidRequirement:
            return False
        same_name = canonicalize_name(mine.name) == canonicalize_name(theirs.name)
        return same_name and mine.specifier == theirs.specifier

    def shown(self) -> ShownOverride:
        """The override as the `--json` documents print it."""
        return ShownOverride(self.requirement, self.version, self.reason)


@named("Override")
@dataclass(frozen=True)
class ShownOverride:
    """An override in patches/upstream.yaml: the requirement it replaces, the version used instead, and why."""

    requirement: str
    version: str
    reason: str


@named("PinOverride")
@dataclass(frozen=True)
class PinnedOverride:
    requirement: str
    version: str
    reason: str
    pin: str


@named("Pin")
@dataclass(frozen=True)
class PinRelease:
    """A release: its tag and commit."""

    tag: str
    commit: str


@dataclass(frozen=True)
class Upstream:
    """One pin of patches/upstream.yaml."""

    name: str
    tag: str
    commit: str
    package_root: str


class UpstreamPin(Strict):
    name: str = "vllm"
    package_root: Annotated[str, Field(pattern=r"^[A-Za-z0-9_]+$")] = "vllm"
    tag: str
    commit: Annotated[str, Field(pattern=HEX40.pattern)]
    source: Annotated[GitSource | WheelSource, Field(discriminator="kind")]
    override: PinOverride | None = Field(
        default=None,
        description="another pin requires this pin's project at a version it does not have: what replaces it, and why",
    )
    companions: list[str] = Field(
        default_factory=list,
        description="projects released in lockstep with this wheel pin (e.g. flashinfer-cubin): where a base has one, "
        "it must be at the pin's version",
    )

    @property
    def version(self) -> str:
        return self.tag.removeprefix("v")

    def row(self) -> Upstream:
        """The pin as the `--json` documents list it."""
        return Upstream(self.name, self.tag, self.commit, self.package_root)

    def release(self) -> PinRelease:
        return PinRelease(self.tag, self.commit)

    def pinned_override(self) -> PinnedOverride | None:
        """The pin's override as `plan --json` lists it, with the pin's name."""
        o = self.override
        return None if o is None else PinnedOverride(o.requirement, o.version, o.reason, self.name)

    @model_validator(mode="after")
    def _override_names_this_project(self) -> UpstreamPin:
        if self.companions and not isinstance(self.source, WheelSource):
            raise ValueError("companions: only a wheel pin (source.kind: wheel) has a version they must match")
        o = self.override
        if o is None:
            return self
        if not isinstance(self.source, WheelSource):
            raise ValueError("override: only a wheel pin (source.kind: wheel) can replace a requirement on it")
        if o.project != canonicalize_name(self.source.project):
            raise ValueError(
                f"override.requirement {o.requirement!r} is not on this pin's project {self.source.project!r}"
            )
        return self


class PinsFile(UpstreamPin):
    """`patches/upstream.yaml`: the first (default) pin at the top level, as a single-upstream project has
    it, and every further upstream as one more pin mapping under `also:`, in order."""

    also: list[UpstreamPin] = Field(default_factory=list, description="further upstreams, same keys each")


class ImageSpec(Strict):
    """What the image issue consumes. Every field may be inherited via `from:`."""

    repository: str | None = None
    tags: list[str] | None = None
    base: str | None = None
    platforms: Annotated[list[PlatformField] | None, BeforeValidator(_platforms)] = None
    site_packages: str | None = Field(
        default=None,
        description="directory holding vllm/ in the base; null = ask the base's python3",
    )
    env: dict[str, str | None] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    entrypoint: Literal["keep", "clear"] | None = Field(
        default=None,
        description="the base's ENTRYPOINT: keep (a passthrough wrapper ending in exec \"$@\", e.g. NGC's "
        'nvidia_entrypoint.sh) or clear (a consuming one such as ["vllm","serve"]); unset: a consuming '
        "ENTRYPOINT is cleared and a passthrough one is an error at build time",
    )


class SmokeSpec(Strict):
    commands: list[str] = Field(default_factory=list, description="run inside the image; each must exit 0")
    skeleton_commands: list[str] = Field(
        default_factory=list,
        description="run instead of `commands` when the base is imgbuild's skeleton stand-in (no torch there)",
    )
    timeout: int = Field(default=600, gt=0)


class VariantConfig(Strict):
    name: Annotated[str, Field(pattern=NAME)]
    description: str = ""
    from_: str | None = Field(default=None, alias="from")
    patches: Literal["all"] | list[str] | None = Field(
        default=None,
        description="groups or patch names to include; 'all' (default for a root variant)",
    )
    revert: list[str] = Field(default_factory=list, description="groups or patch names to leave out")
    image: ImageSpec = Field(default_factory=ImageSpec)
    smoke: SmokeSpec = Field(default_factory=SmokeSpec)


def load_pins(path: Path) -> tuple[UpstreamPin, ...]:
    """Every pin of `path`, the first (top-level) one first; names and package roots must be unique."""
    doc = load_yaml(path)
    data = validate(doc, PinsFile)
    first = UpstreamPin.model_validate(data.model_dump(by_alias=True, exclude={"also"}))
    pins = (first, *data.also)
    for key in ("name", "package_root"):
        seen: set[str] = set()
        for pin in pins:
            value = getattr(pin, key)
            if value in seen:
                raise ConfigError(
                    f"{path}: two upstreams have {key} {value!r}",
                    hint=f"give each pin under also: its own {key}",
                )
            seen.add(value)
    return pins


def load_variant(path: Path) -> VariantConfig:
    variant = validate(load_yaml(path), VariantConfig)
    if variant.name != path.stem:
        raise ConfigError(
            f"{path}: name {variant.name!r} does not match the file name {path.stem!r}",
            hint=f"rename the file to {variant.name}.yaml or set name: {path.stem}",
        )
    return variant
