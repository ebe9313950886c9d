"""Files written whole: readable by others (a committed lock, a recipe another user launches)."""

from __future__ import annotations

import stat
from pathlib import Path

from imgbuild.atomic import write_text


def test_write_text_replaces_the_file_and_leaves_it_0644(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "images.lock"
    write_text(path, "one\n")
    write_text(path, "two\n")
    assert path.read_text() == "two\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["images.lock"]  # no temp file left
