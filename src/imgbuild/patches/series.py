"""The quilt `series` file: one patch per line, `#` comments, optional -p1."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imgbuild.errors import ConfigError


@dataclass(frozen=True)
class SeriesEntry:
    filename: str
    line: int


def parse_series(path: Path) -> list[SeriesEntry]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{path}: series file not found", hint="create patches/series listing one patch per line"
        ) from exc
    entries: list[SeriesEntry] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *opts = line.split()
        if opts not in ([], ["-p1"]):
            raise ConfigError(
                f"{path}:{lineno}: unsupported options {' '.join(opts)!r} for {name}",
                hint="imgbuild patches are -p1 git-style diffs; remove the option",
            )
        if "/" in name or name.startswith("."):
            raise ConfigError(f"{path}:{lineno}: {name!r} must be a file name inside patches/")
        if name in seen:
            raise ConfigError(f"{path}:{lineno}: {name} is listed twice (first on line {seen[name]})")
        seen[name] = lineno
        entries.append(SeriesEntry(name, lineno))
    return entries
