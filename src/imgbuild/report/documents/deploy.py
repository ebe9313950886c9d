"""The documents of deploying and of failing: recipe, history, rollback, error."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from imgbuild.deploy.recipes import RecipeWritten
from imgbuild.report.documents import Contract, Document, Part
from imgbuild.report.documents.parts import ErrorBody, SmokeReport

RECIPE = Contract("recipe", RecipeWritten, "`imgbuild recipe VARIANT --profile P --json`")


class HistoryUpstream(Part):
    name: str
    url: str
    tag: str
    commit: str


class Base(Part):
    name: str
    digest: str | None


class SmokeRecord(Part):
    ok: bool
    tested_as: str
    failed: list[str]


class InRegistry(Part):
    ref: str
    digest: str | None
    moving: list[str]


class Entry(Part):
    """One build of the variant in the local store."""

    ref: str
    image_id: str
    kind: Literal["image", "join"]
    platforms: dict[str, str] = Field(description="platform -> that platform's image id")
    parts: dict[str, str] = Field(description="platform -> that platform's immutable tag")
    version: str
    upstreams: list[HistoryUpstream]
    series: str
    patches: dict[str, Literal["applied", "reverted"]]
    base: Base
    created: str = Field(description="the newest input's date (labels carry no wall clock)")
    inputs: str
    last_tagged: str | None = Field(description="the engine's LastTagTime: when any tag of the image was last written")
    smoke: Literal["passed", "failed", "unknown"]
    smoke_records: dict[str, SmokeRecord | None]
    moving: list[str]
    registry: InRegistry | None


class RegistryMoving(Part):
    registry: str
    moving: dict[str, str | None]
    platforms: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="each moving tag that names an index: platform -> the local build of that manifest (its "
        "immutable tag), or the digest when none is here (a publish of some platforms keeps the others)",
    )


class History(Document):
    """`imgbuild history VARIANT --json`: the variant's builds in the local store, newest first"""

    name = "history"
    variant: str
    repository: str
    order: str
    moving: dict[str, str | None]
    registry: RegistryMoving | None
    entries: list[Entry]


class Move(Part):
    ref: str
    from_: str | None = Field(alias="from")
    to: str
    moved: bool


class PinnedRecipe(Part):
    profile: str
    path: str | None
    text: str


class Rollback(Document):
    """`imgbuild rollback VARIANT --to TAG|DIGEST --json`"""

    name = "rollback"
    variant: str
    target: Entry
    pinned: str = Field(description="what the recipe pins: the immutable tag, or REG/REPO@digest with --registry")
    smoked: bool
    smoke: list[SmokeReport]
    moves: list[Move]
    registry_moves: list[Move]
    recipes: list[PinnedRecipe]


class Error(Document):
    """The failure document of any command under --json (printed by cli/main.py)."""

    name = "error"
    error: ErrorBody
