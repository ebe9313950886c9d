"""Tiers fail rather than skip: the only skips in tests/ are the opt-in tests of ALLOWED_SKIPS.

The run itself checks what was skipped under IMGBUILD_CHECK_SKIPS=1 (`.ci/run`); this reads the sources,
so a new `pytest.skip` in a tier the fast run never collects is caught here, in the fast tier.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ALLOWED_SKIPS, allowed_skip

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
SKIPS = ("skip", "skipif", "importorskip")


def _skip_name(node: ast.AST) -> str | None:
    """`pytest.skip(...)`, `pytest.importorskip(...)`, `pytest.mark.skip(if)`: the name; else None."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute) and target.attr in SKIPS:
        base = ast.unparse(target.value)
        if base in ("pytest", "pytest.mark"):
            return f"{base}.{target.attr}"
    return None


def skips_in(path: Path) -> list[tuple[str, int, str]]:
    """(node id without parameters, or the file for a module-level skip; line; which skip) in one file."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(REPO).as_posix()
    found: set[tuple[str, int, str]] = set()  # a set: `pytest.mark.skipif(...)` is both a Call and its Attribute
    for top in tree.body:
        owner = f"{rel}::{top.name}" if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) else rel
        for node in ast.walk(top):
            name = _skip_name(node)
            if name is not None:
                found.add((owner, node.lineno, name))
    return sorted(found)


def test_every_skip_in_tests_is_an_allowed_opt_in() -> None:
    found = [s for path in sorted(TESTS.rglob("*.py")) for s in skips_in(path)]
    refused = [f"{owner}:{line}: {name}" for owner, line, name in found if allowed_skip(owner) is None]
    assert not refused, (
        "a tier that is asked for runs, or fails: make these fail naming what they need "
        "(tests/support/needs.py), or list a documented opt-in test in ALLOWED_SKIPS (tests/conftest.py):\n"
        + "\n".join(refused)
    )
    # and every allowed skip is still there: the list names no test that was removed or renamed
    assert {owner for owner, _, _ in found} == set(ALLOWED_SKIPS)


def test_a_skip_of_a_parametrized_test_is_allowed_by_its_name() -> None:
    name = next(iter(ALLOWED_SKIPS))
    assert allowed_skip(f"{name}[linux/arm64]") == ALLOWED_SKIPS[name]
    assert allowed_skip(name.replace("::test_", "::test_not_")) is None
