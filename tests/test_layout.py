"""The package layout shows the architecture: imports run one way (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "imgbuild"

# Lower ranks never import higher ones; equal ranks of different rooms don't import each other.
RANK = {
    "errors": 0,
    "digests": 0,
    "atomic": 0,
    "lazy": 0,
    "config": 1,
    "upstream": 2,
    "patches": 3,
    "project": 4,
    "registry": 4,
    "images": 5,
    "stack": 5,
    "deploy": 6,
    "report": 7,
    "cli": 8,
    "__main__": 9,
}


def imported_rooms(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "imgbuild" else [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "imgbuild" and len(parts) > 1 and parts[1] in RANK:
                found.append((node.lineno, parts[1]))
    return found


def test_every_module_lives_in_a_room_of_the_map() -> None:
    rooms = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.rglob("*.py")}
    assert rooms - {"__init__"} <= set(RANK), f"rooms missing from RANK and docs/architecture.md: {rooms - set(RANK)}"


def test_imports_run_one_way() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        room = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if room == "__init__":
            continue
        for line, other in imported_rooms(path):
            if other != room and RANK[other] >= RANK[room]:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line}: {room} imports {other}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)
