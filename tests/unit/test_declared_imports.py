"""Installable as declared: every module a test imports comes from a distribution that pyproject.toml
names (the main dependencies or the `[test]` extra), or is one of the few listed below with where it
comes from instead. The GitHub workflow's fast job installs that extra.

Imports are read with `ast` from every file under tests/ (imports inside functions too, and
`needs.module("X", ...)`); a module maps to its distributions through
`importlib.metadata.packages_distributions()`.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIRST_PARTY = {"imgbuild", "tests"}
# tier of each folder under tests/; support/ and the top conftest serve every tier, so they count as fast
TIERS = {"docker": "docker", "release": "release", "gpu": "gpu"}
# module -> (the tiers that may import it, where it comes from instead of pyproject.toml)
NOT_FROM_PYPROJECT = {
    "torch": (
        {"release", "gpu"},
        ".ci/setup-dev.sh installs CPU torch==2.13.0 (a 200 MB wheel the fast tier does not need); "
        "the GPU tier's CUDA build is installed by hand",
    ),
    "triton": ({"gpu"}, "comes with the CUDA build of torch on the GPU machine"),
    "vllm": ({"release"}, "the patched release tree itself, put on sys.path by tests/release/sm12x/conftest.py"),
    "regex": ({"release"}, "optional: weight_utils imports `regex as re`; the test falls back to re"),
}


def tier_of(path: Path) -> str:
    parts = path.relative_to(TESTS).parts
    return TIERS.get(parts[0], "fast") if len(parts) > 1 else "fast"


def imported(path: Path) -> set[str]:
    """Top-level names of the modules one file imports (first-party, stdlib and relative imports left out)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "needs.module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(str(node.args[0].value))
    tops = {name.split(".")[0] for name in names}
    return {top for top in tops if top not in FIRST_PARTY and top not in sys.stdlib_module_names}


def declared() -> set[str]:
    """Canonical names of the distributions pyproject.toml installs: dependencies and the [test] extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    return {canonicalize_name(Requirement(r).name) for r in reqs}


def test_every_test_import_is_declared_for_its_tier() -> None:
    dists = importlib.metadata.packages_distributions()
    wanted = declared()
    problems = []
    for path in sorted(TESTS.rglob("*.py")):
        tier = tier_of(path)
        for module in sorted(imported(path)):
            tiers, _ = NOT_FROM_PYPROJECT.get(module, (set(), ""))
            if tier in tiers:
                continue
            # not installed here (sparkrun: Python >= 3.12 only): declared under its own name, or not at all
            provided_by = {canonicalize_name(d) for d in dists.get(module, [module])}
            if not provided_by & wanted:
                problems.append(f"{path.relative_to(REPO)} ({tier} tier) imports {module}, from {sorted(provided_by)}")
    assert not problems, (
        "add the distribution to the [test] extra (or dependencies) in pyproject.toml, or, when the tier gets "
        "it another way, to NOT_FROM_PYPROJECT with that way:\n" + "\n".join(problems)
    )


def test_the_exceptions_are_still_imported_where_they_are_allowed() -> None:
    """NOT_FROM_PYPROJECT lists nothing that no test imports any more."""
    seen = {(module, tier_of(p)) for p in TESTS.rglob("*.py") for module in imported(p)}
    for module, (tiers, _) in NOT_FROM_PYPROJECT.items():
        assert any((module, t) in seen for t in tiers), f"{module} is no longer imported by the {tiers} tiers"


def test_the_github_fast_job_installs_the_test_extra() -> None:
    """The job that runs the fast tier (`python -m pytest` without --docker) installs `.[test]`."""
    jobs = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    fast = [
        job
        for job in jobs.values()
        if any("-m pytest" in s.get("run", "") and "--docker" not in s.get("run", "") for s in job["steps"])
    ]
    assert fast, "no job in ci.yml runs the fast tier"
    for job in fast:
        installs = [s["run"] for s in job["steps"] if "pip install" in s.get("run", "")]
        assert any(".[test]" in run for run in installs), installs
