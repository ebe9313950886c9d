"""What `build` is asked to do beyond the selection (`--base`, `--repository`, `--force`, smoke, `--builder`):
the options that `build`, `publish`, `patches bump` and `smoke VARIANT` share, apart from the build itself."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuildOptions:
    base: str | None = None  # "skeleton" or an image reference; overrides image.base
    repository: str | None = None  # overrides image.repository (e.g. for tests)
    force: bool = False
    smoke: bool = True
    verbose: bool = False
    builder: str | None = None  # a buildx builder (remote or multi-node BuildKit); default: buildx's own choice
