"""Which directory is the project: the command's --project, $IMGBUILD_PROJECT, or the nearest parent holding
patches/series. Standard library only, so that a command finds its project before it loads anything."""

from __future__ import annotations

import os
from pathlib import Path

from imgbuild.errors import ConfigError


def find_root(start: Path | None = None, chosen: Path | None = None) -> Path:
    """The project: `chosen` (the command's --project), else $IMGBUILD_PROJECT, else the nearest parent of `start`
    with patches/series."""
    chosen = chosen or (Path(os.environ["IMGBUILD_PROJECT"]) if os.environ.get("IMGBUILD_PROJECT") else None)
    if chosen is not None:
        root = chosen.resolve()
        if not (root / "patches" / "series").is_file():
            raise ConfigError(
                f"{root} is not an imgbuild project (no patches/series)",
                hint="pass the directory that holds patches/ and images/ to --project/-C",
            )
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "patches" / "series").is_file():
            return candidate
    raise ConfigError(
        f"no imgbuild project found at or above {here} (looked for patches/series)",
        hint="run inside the project, or pass --project DIR (or set IMGBUILD_PROJECT)",
    )
