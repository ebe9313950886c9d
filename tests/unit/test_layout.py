"""The package layout shows the architecture: imports run one way (CONTRIBUTING.md, Layout)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "imgbuild"

# Lower ranks never import higher ones; equal ranks of different rooms don't import each other.
RANK = {
    "errors": 0,
    "digests": 0,
    "atomic": 0,
    "proc": 0,
    "owner": 0,  # who made a container: its label, and whether its maker is certainly dead
    "progress": 0,  # Say, the one progress-callback type, and its ends (to_stderr, quiet)
    "jsondoc": 0,  # the --json contract: each document's schema id and version
    "platforms": 0.5,  # the Platform value: on errors only
    "offline": 0.5,  # the offline switch: on errors only
    "cache": 0.5,  # where the cache is: on errors only
    "root": 0.5,  # which directory is the project: on errors only
    "shapes": 0.5,  # how a domain value prints under --json (pydantic marks on its fields)
    "config": 1,
    "upstream": 2,
    "patches": 3,
    "engine": 3.5,  # the Docker engine: the docker SDK, the one `buildx build`, the one door to the docker CLI
    "project": 4,
    "registry": 4,  # image references, `docker push` / `imagetools` (through engine/door.py), images.lock
    "plan": 5,  # pure: what the images will be
    "smoke": 6,  # checks on a built image
    "builder": 7,  # make the images (and smoke them)
    "publish": 8,
    "workflows": 8,  # the patch author's workflows
    "deploy": 9,
    "report": 10,
    "cli": 11,
    "__main__": 12,
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
    assert rooms - {"__init__"} <= set(RANK), f"rooms missing from RANK and CONTRIBUTING.md: {rooms - set(RANK)}"


def test_every_module_says_its_job_in_its_docstring() -> None:
    """docs/architecture.md keeps no table of modules: each module's job is its docstring."""
    import ast

    bare = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "__init__.py" and not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert not bare, f"modules without a docstring saying their job: {bare}"


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


# The one module that starts processes on the host (the tools' funnels sit on it), and the program
# smoke runs inside the image, which is shipped as a resource and never runs here.
PROCESS_FUNNEL = PACKAGE / "proc.py"
IN_IMAGE = PACKAGE / "smoke" / "in_image"


def test_only_the_process_funnel_mentions_subprocess() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PROCESS_FUNNEL or IN_IMAGE in path.parents:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "subprocess" in line or "os.system" in line or "os.exec" in line or "os.spawn" in line:
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not found, "start processes through imgbuild.proc (or a tool's funnel on it):\n" + "\n".join(found)


def test_the_in_image_programs_are_not_imported_on_the_host() -> None:
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if IN_IMAGE in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any("in_image" in n for n in names):
                    importers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert list(IN_IMAGE.glob("*.py")) and not importers, importers


DOCKER_DOOR = PACKAGE / "engine" / "door.py"


def test_only_the_engines_door_resolves_the_docker_cli() -> None:
    """engine/door.py is the one door to the docker CLI (issue 45): no other module reads IMGBUILD_DOCKER."""
    found = {
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "environ" in line and "IMGBUILD_DOCKER" in line
    }
    assert {f.partition(":")[0] for f in found} == {"engine/door.py"}, f"go through {DOCKER_DOOR}'s run_cli: {found}"
