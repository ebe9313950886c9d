"""Fixtures for the SM12x / Engram patch tests (the ``release`` tier).

The tests run on a CPU. They read the patched sources of the pinned vLLM release from
``patched_tree`` and load only the definitions they exercise (see
``PatchedSource``), with the heavy GPU-only imports replaced by named stand-ins
in each test. Pure vLLM modules that import on a CPU (the platform interface,
the KV cache specs) are imported for real from the same patched tree.
"""

from __future__ import annotations

import ast
import copy
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.support import needs

REPO_ROOT = Path(__file__).resolve().parents[3]
PATCHES_DIR = REPO_ROOT / "patches"


def _materialize_patched_tree(dest: Path) -> None:
    """The pinned release with the whole series applied, written by the engine
    (`imgbuild patches apply --into`), exactly as the images get it."""
    proc = subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(REPO_ROOT), "patches", "apply", "--into", str(dest), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"imgbuild patches apply failed:\n{proc.stderr}")


@pytest.fixture(scope="session")
def patched_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the patched ``vllm/`` package sources."""
    needs.module("torch", "release", "the SM12x and Engram patch tests run the patched code on CPU torch")
    dest = tmp_path_factory.mktemp("vllm-patched")
    _materialize_patched_tree(dest)
    return dest


# --------------------------------------------------------------------------
# Loading patched definitions.
# --------------------------------------------------------------------------


class _DropAnnotations(ast.NodeTransformer):
    """Annotations name types from imports the tests do not make; they carry
    no behaviour here, so they are removed before compiling."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        node.returns = None
        arguments = node.args
        for arg in [
            *arguments.posonlyargs,
            *arguments.args,
            *arguments.kwonlyargs,
            arguments.vararg,
            arguments.kwarg,
        ]:
            if arg is not None:
                arg.annotation = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign([node.target], node.value), node)


def _top_level_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


class PatchedSource:
    """Compiles chosen definitions of a patched source file, as written there.

    ``load(relpath, names, namespace)`` takes top-level functions, classes and
    constants by name, or a method as ``"Class.method"`` (compiled as a plain
    function ``Class__method``, without its decorators), and executes them in
    ``namespace``: the test decides what every other global name stands for.
    Code objects keep the patched file's path, so tracebacks point into it.
    """

    def __init__(self, tree: Path) -> None:
        self.tree = tree

    def path(self, relpath: str) -> Path:
        return self.tree / relpath

    def load(
        self,
        relpath: str,
        names: Iterable[str],
        namespace: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        path = self.path(relpath)
        module = ast.parse(path.read_text(), filename=str(path))
        top: dict[str, ast.stmt] = {}
        for node in module.body:
            for name in _top_level_names(node):
                top[name] = node
        body: list[ast.stmt] = []
        for name in names:
            owner, _, method = name.partition(".")
            if owner not in top:
                raise LookupError(f"{relpath} defines no top-level {owner!r}")
            node = top[owner]
            if not method:
                if node not in body:
                    body.append(node)
                continue
            assert isinstance(node, ast.ClassDef), name
            found = [item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == method]
            if not found:
                raise LookupError(f"{relpath}: {owner} has no method {method!r}")
            function = copy.deepcopy(found[0])
            function.name = f"{owner}__{method}"
            function.decorator_list = []
            body.append(function)
        tree = ast.fix_missing_locations(_DropAnnotations().visit(ast.Module(body=body, type_ignores=[])))
        scope: dict[str, Any] = {"__name__": f"patched:{relpath}"}
        scope.update(namespace or {})
        exec(compile(tree, str(path), "exec"), scope)
        return scope


@pytest.fixture(scope="session")
def patched_source(patched_tree: Path) -> PatchedSource:
    return PatchedSource(patched_tree)


@pytest.fixture(scope="session")
def patched_vllm(patched_tree: Path) -> Path:
    """Make ``import vllm`` resolve to the patched tree (for the pure modules
    that import without GPU libraries)."""
    loaded = sys.modules.get("vllm")
    if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(str(patched_tree)):
        pytest.fail(f"another vllm is already imported: {loaded.__file__}")
    sys.path.insert(0, str(patched_tree))
    return patched_tree


# --------------------------------------------------------------------------
# A CUDA platform with a chosen device capability.
# --------------------------------------------------------------------------


@pytest.fixture
def make_platform(patched_vllm: Path) -> Callable[..., Any]:
    """``make_platform((12, 1))`` -> a vLLM ``Platform`` reporting that
    capability; the capability predicates are vLLM's own."""
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    def make(capability: tuple[int, int] | None, enum: PlatformEnum = PlatformEnum.CUDA) -> Platform:
        class FakePlatform(Platform):
            _enum = enum
            device_type = "cuda"

            @classmethod
            def get_device_capability(cls, device_id: int = 0):
                if capability is None:
                    return None
                return DeviceCapability(*capability)

        return FakePlatform()

    return make
