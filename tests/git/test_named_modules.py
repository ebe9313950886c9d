"""No docstring, doc or test names a module that does not exist (issue 21: the layout moved twice).

Two spellings are checked: dotted (`imgbuild.builder.runner`, `imgbuild.smoke.checks.smoke`) in every .py and .md
file of the repository, and a path inside the package (`smoke/checks.py`, `src/imgbuild/engine.py`) in the docs
and in src/. A dotted name passes when its longest importable prefix is a module and the rest is an attribute
of it; a path passes when the file is there. It imports what it checks (gitpython starts git): hence tests/git/."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "imgbuild"
ROOMS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
MODULES = {*ROOMS, *(p.stem for p in PACKAGE.glob("*.py"))} - {"__init__"}
# Rooms and modules that were (issue 21 names them): a name under one of them is stale, not another namespace.
GONE = {
    "images",
    "stack",
    "build",
    "docker_engine",
    "buildplan",
    "planner",
    "ocilayer",
    "replay",
    "export",
    "pq",
    "lazy",
}
# `imgbuild.<module or former module>...`, not followed by `/N` (a schema id) or `-` (a label such as
# `imgbuild.site-packages`); other `imgbuild.` names are git config keys and labels.
NAMES = "|".join(sorted(MODULES | GONE))
DOTTED = re.compile(r"\bimgbuild\.(?:" + NAMES + r")\b(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?![\w/-])")
PATHS = re.compile(r"(?<![\w/.-])(?:src/imgbuild/)?((?:" + "|".join(ROOMS) + r")/[a-z_/]+\.py)\b")
SKIP = {"CHANGELOG.md"}  # it names what was renamed


def files(*suffixes: str) -> list[Path]:
    out = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in {".git", "benchmarks", "build", "dist"} or "results" in rel.parts or path.name in SKIP:
            continue
        if path.suffix in suffixes and path.is_file() and not any(p.startswith(".") for p in rel.parts[:-1]):
            out.append(path)
    return out


def label_keys() -> set[str]:
    """The image label keys in `imgbuild.` (plan/labels.py writes them as f"{PREFIX}..."): they share the package's
    name, and `imgbuild.upstream.*` its upstream package's, but they are not modules."""
    text = (PACKAGE / "plan" / "labels.py").read_text(encoding="utf-8")
    return {"imgbuild." + key for key in re.findall(r'f"\{PREFIX\}([a-z.-]+)"', text)}


def resolves(dotted: str) -> bool:
    """The module's file is there, and what follows it is an attribute of it (unchecked when the module needs a
    package this Python lacks: the sparkrun builder plugin is loaded by sparkrun, Python 3.12 or later)."""
    parts, path = dotted.split("."), PACKAGE.parent
    for n, part in enumerate(parts):
        if (path / part).is_dir():
            path = path / part
            continue
        module, attrs = parts[:n], parts[n:]
        if (path / f"{part}.py").is_file():
            module, attrs = parts[: n + 1], parts[n + 1 :]
        elif n == 0:
            return False
        try:
            obj: object = importlib.import_module(".".join(module))
        except ModuleNotFoundError as exc:
            return not (exc.name or "").startswith("imgbuild")
        for attr in attrs:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return True


def test_every_dotted_imgbuild_name_exists() -> None:
    missing, labels = [], label_keys()
    for path in files(".py", ".md"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in DOTTED.findall(line):
                name = name.rstrip(".")
                if name in labels or any(name.startswith(k + ".") for k in labels) or resolves(name):
                    continue
                missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
    assert not missing, "names of modules or attributes that do not exist:\n" + "\n".join(missing)


def test_every_package_path_in_docs_and_src_exists() -> None:
    missing = []
    for path in [*files(".md"), *sorted(PACKAGE.rglob("*.py"))]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for rel in PATHS.findall(line):
                if not (PACKAGE / rel).is_file():
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {rel}")
    assert not missing, "paths of modules that do not exist:\n" + "\n".join(missing)


def test_no_test_file_is_named_after_a_module_that_is_gone() -> None:
    """`tests/*/test_pq.py` outlived `pq`: a test file's name says what it tests, so one named after a module that
    is gone (GONE) is renamed with what it now tests."""
    anywhere = {p.stem for p in PACKAGE.rglob("*.py")}  # cli/build.py: `build` is a module again, as a command
    stale = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.stem.removeprefix("test_") in GONE - anywhere
    )
    assert stale == [], f"test files named after modules that are gone: {stale}"
