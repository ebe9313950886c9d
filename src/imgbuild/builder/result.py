"""What a build made, as values: each platform's image (built or reused, its tags, its smoke report) and how the
images' layers relate. `builder/runner.py` makes it; a build with nothing to do reads it back from its receipt
(builder/receipt.py) without loading the plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from imgbuild.platforms import Platform
from imgbuild.shapes import EmptyIsNull
from imgbuild.smoke.report import SmokeReport

OnSmoke = Callable[[SmokeReport], None]  # told each image's smoke report as the build has it


@dataclass
class ImageBuilt:
    """One platform's image; `index`/`index_ref`: the multi-platform image it is part of (null for a one-platform
    variant)."""

    variant: str
    platform: Platform
    image_id: str
    immutable: str
    moving: tuple[str, ...]
    inputs_digest: str
    built: bool
    moved: bool
    layers: Annotated[tuple[str, ...], Field(serialization_alias="rootfs_layers")]  # RootFS diff ids
    base_layers: int = 0
    index: EmptyIsNull = ""  # the multi-platform image this platform's image is part of
    index_ref: EmptyIsNull = ""
    note: str = ""
    smoke: SmokeReport | None = None


@dataclass
class BuildResult:
    """What a build made: each platform's image, tagged and smoke-tested."""

    images: list[ImageBuilt] = field(default_factory=list)


def sharing(images: Sequence[ImageBuilt]) -> dict[str, str]:
    """variant -> how its RootFS layers relate to the other images built (read back from the daemon)."""
    out = {}
    for img in images:
        own = len(img.layers) - img.base_layers
        text = f"{img.base_layers} base + {own} imgbuild layer{'s' if own != 1 else ''}"
        below = [
            o for o in images
            if o is not img and o.platform == img.platform and len(o.layers) > o.base_layers
            and len(o.layers) < len(img.layers) and img.layers[: len(o.layers)] == o.layers
        ]  # fmt: skip
        if below:
            best = max(below, key=lambda o: len(o.layers))
            text += f"; its bottom {len(best.layers)} layers are {best.variant}'s, byte for byte"
        out[f"{img.variant} {img.platform}"] = text
    return out


# What a run says of an image it did not build: the runner and a receipt say it alike.
def reused(variant: str, immutable: str, inputs_digest: str) -> str:
    return f"{variant}: {immutable} unchanged (inputs {inputs_digest[:12]}), reused (no docker build)"


def up_to_date(variant: str, platform: Platform, moving: Sequence[str], index_ref: str) -> str:
    if index_ref:
        return f"{variant} ({platform}): {', '.join(moving)} already name {index_ref}: up to date"
    return f"{variant}: {', '.join(moving) or 'no moving tag'}: already up to date"
