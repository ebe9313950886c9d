"""What the last full smoke test of an image said, kept by image id under `<cache>/smoke/` (the engine has nowhere
to keep it); `history` reads it. Best effort: a cache that cannot be written loses the record, not the test."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from imgbuild.atomic import write_json
from imgbuild.cache import cache_dir

DIR = "smoke"


@dataclass(frozen=True)
class SmokeRecord:
    ok: bool
    image: Annotated[str, Field(serialization_alias="tested_as")]  # the reference it was tested under
    failed: tuple[str, ...]  # `group name` of each failing check


def _path(image_id: str, cache: Path | None) -> Path:
    return (cache or cache_dir()) / DIR / f"{image_id.replace(':', '-')}.json"


def record(image_id: str, image: str, ok: bool, failed: list[str], cache: Path | None = None) -> None:
    with contextlib.suppress(OSError):
        write_json(_path(image_id, cache), {"ok": ok, "image": image, "failed": failed})


def recorded(image_id: str, cache: Path | None = None) -> SmokeRecord | None:
    """The record of `image_id`'s last full smoke test; None: never tested here (or --no-smoke, or --static)."""
    try:
        data = json.loads(_path(image_id, cache).read_text())
        return SmokeRecord(bool(data["ok"]), str(data["image"]), tuple(str(f) for f in data["failed"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
