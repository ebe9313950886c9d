"""Every FlashInfer import vLLM makes, and every call it makes to what those
imports name, resolved statically against a FlashInfer source tree: the
evidence for letting FlashInfer stand at 0.7.4 where vLLM 0.34.0 asks for
0.7.3 (patches/upstream.yaml's override; issue 46 item 7).

Static, because FlashInfer's modules import CUDA and JIT machinery a CPU
cannot load: each module is parsed, and a name is found the way Python would
find it, through ``from .x import y as z``, ``import``, star imports (their
``__all__`` when there is one), assignments, definitions and submodules. A
module with a module-level ``__getattr__`` resolves any name ("dynamic").

A call is checked when its callee is a FlashInfer function or class that an
import names directly (``from flashinfer.x import f; f(...)``,
``flashinfer.x.f(...)``, ``x.f(...)`` after ``from flashinfer import x``):
positional count, keyword names, and the required parameters it leaves out
(only when the call has no ``*args``/``**kwargs``). A class is checked
against its own ``__init__``; a class without one, a decorated function whose
decorator is not a plain wrapper, or a callee bound by assignment is counted
as not checkable, never as passing. Method calls on instances (``wrapper.plan``)
are out of reach of a static check and not counted. Names are taken per file:
an import inside a function binds its name for the whole file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Definition:
    kind: str  # "module", "function", "class", "value", "dynamic"
    where: str  # "flashinfer/x.py:12"
    node: ast.AST | None = None
    module: str = ""


@dataclass
class Report:
    imports: int = 0
    calls_checked: int = 0
    calls_unchecked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


# Decorators that keep the wrapped function's signature (functools.wraps
# wrappers, caches, FlashInfer's API logger and its backend/arch gates).
_PLAIN_DECORATORS = {
    "flashinfer_api",
    "functools.cache",
    "cache",
    "functools.lru_cache",
    "lru_cache",
    "torch.compiler.disable",
    "backend_requirement",
    "supported_compute_capability",
    "deprecated",
    "staticmethod",
    "classmethod",
    "torch.library.custom_op",
    "register_custom_op",
    "nvtx_range",
    "functools.wraps",
}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return "?"


class FlashInferTree:
    """The ``flashinfer`` package under `root` (root/flashinfer/...)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._parsed: dict[str, ast.Module | None] = {}
        self._statements: dict[str, list[ast.stmt]] = {}
        self._resolved: dict[tuple[str, str], Definition | None] = {}

    def _file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def _tree(self, module: str) -> ast.Module | None:
        if module not in self._parsed:
            path = self._file(module)
            self._parsed[module] = ast.parse(path.read_text(), filename=str(path)) if path else None
        return self._parsed[module]

    def is_module(self, module: str) -> bool:
        return self._file(module) is not None

    def _where(self, module: str, node: ast.AST) -> str:
        path = self._file(module)
        assert path is not None
        return f"{path.relative_to(self.root)}:{getattr(node, 'lineno', 0)}"

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        path = self._file(module)
        assert path is not None
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{node.module}" if node.module else package

    def resolve(self, module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> Definition | None:
        """What `name` is in FlashInfer module `module`, or None."""
        key = (module, name)
        if key in self._resolved:
            return self._resolved[key]
        if key in seen:
            return None
        found = self._resolve(module, name, seen | {key})
        if not seen:  # a complete answer, not one cut short by a cycle
            self._resolved[key] = found
        return found

    def _resolve(self, module: str, name: str, seen: frozenset[tuple[str, str]]) -> Definition | None:
        tree = self._tree(module)
        if tree is None:
            return None
        if module not in self._statements:
            self._statements[module] = _top_level(tree)
        found: Definition | None = None
        stars: list[str] = []
        dynamic = False
        for node in self._statements[module]:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
                dynamic = True
            if isinstance(node, ast.ImportFrom) and self._absolute(module, node).startswith("flashinfer"):
                source = self._absolute(module, node)
                stars += [source for alias in node.names if alias.name == "*"]
                found = self._imported(source, node, name, seen) or found
            else:
                found = self._bound_here(module, node, name) or found
        if found is not None:
            return found
        for source in stars:
            inner = self.resolve(source, name, seen)
            if inner is not None:
                return inner
        if self.is_module(f"{module}.{name}"):
            return Definition("module", f"{module}.{name}", module=f"{module}.{name}")
        if dynamic:
            return Definition("dynamic", f"{module}.__getattr__", module=module)
        return None

    def _imported(
        self, source: str, node: ast.ImportFrom, name: str, seen: frozenset[tuple[str, str]]
    ) -> Definition | None:
        """`name` as a ``from <flashinfer module> import`` binds it."""
        for alias in node.names:
            if alias.name != "*" and (alias.asname or alias.name) == name:
                inner = self.resolve(source, alias.name, seen)
                if inner is None and self.is_module(f"{source}.{alias.name}"):
                    inner = Definition("module", f"{source}.{alias.name}", module=f"{source}.{alias.name}")
                return inner
        return None

    def _bound_here(self, module: str, node: ast.stmt, name: str) -> Definition | None:
        """`name` as a definition, assignment or other import binds it."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            return Definition(kind, self._where(module, node), node, module)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            names += [e.id for t in targets if isinstance(t, ast.Tuple) for e in t.elts if isinstance(e, ast.Name)]
            if name in names:
                return Definition("value", self._where(module, node), node, module)
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return Definition("value", self._where(module, node), node, module)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.partition(".")[0]) == name:
                    target = alias.name if alias.asname else alias.name.partition(".")[0]
                    return Definition("module", target, module=target)
        return None

    def resolve_path(self, dotted: str) -> Definition | None:
        """`flashinfer.a.b.c`: the longest module prefix, then attributes."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if self.is_module(module):
                found: Definition | None = Definition("module", module, module=module)
                for part in parts[cut:]:
                    assert found is not None
                    if found.kind != "module":
                        return Definition("value", found.where)  # an attribute of a class or value
                    found = self.resolve(found.module, part)
                    if found is None:
                        return None
                return found
        return None


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Module-level statements, with those inside if/try/with blocks."""
    out: list[ast.stmt] = []
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        out.append(node)
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            stack[:0] = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                stack[:0] = handler.body
    return out


def _signature_problem(definition: Definition, call: ast.Call, skip_self: bool) -> str | None:
    node = definition.node
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    args = node.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    if skip_self and positional:
        positional = positional[1:]
    named = positional[len(args.posonlyargs) - (1 if skip_self and args.posonlyargs else 0) :] + [
        a.arg for a in args.kwonlyargs
    ]
    has_star = any(isinstance(a, ast.Starred) for a in call.args)
    has_kwargs = any(k.arg is None for k in call.keywords)
    given = len(call.args)
    if not has_star and given > len(positional) and args.vararg is None:
        return f"{given} positional arguments, it takes {len(positional)}"
    keywords = [k.arg for k in call.keywords if k.arg is not None]
    if args.kwarg is None:
        unknown = [k for k in keywords if k not in named]
        if unknown:
            return f"no parameter {', '.join(unknown)}"
    if has_star or has_kwargs:
        return None
    defaults = len(args.defaults)
    required = positional[: len(positional) - defaults] if defaults else positional
    missing = [p for p in required[given:] if p not in keywords]
    kwonly = zip(args.kwonlyargs, args.kw_defaults, strict=True)
    missing += [a.arg for a, d in kwonly if d is None and a.arg not in keywords]
    if missing:
        return f"required {', '.join(missing)} not given"
    return None


def _plain(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    names = [_dotted(d) for d in node.decorator_list]
    return all(n in _PLAIN_DECORATORS or n.split(".")[-1] in _PLAIN_DECORATORS for n in names)


def _imports(tree: ast.Module, where: Path, flashinfer: FlashInferTree, report: Report) -> dict[str, str]:
    """Check the file's FlashInfer imports; returns what they bind (local
    name -> dotted FlashInfer path)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "flashinfer":
                    continue
                report.imports += 1
                if not flashinfer.is_module(alias.name):
                    report.problems.append(f"{where}:{node.lineno}: import {alias.name}: no such module")
                bound[alias.asname or "flashinfer"] = alias.name if alias.asname else "flashinfer"
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if module.split(".")[0] != "flashinfer":
                continue
            for alias in node.names:
                report.imports += 1
                if alias.name == "*":
                    if not flashinfer.is_module(module):
                        report.problems.append(f"{where}:{node.lineno}: from {module} import *: no such module")
                    continue
                if flashinfer.resolve_path(f"{module}.{alias.name}") is None:
                    report.problems.append(f"{where}:{node.lineno}: from {module} import {alias.name}: not found")
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
    return bound


def _call_problem(definition: Definition, call: ast.Call) -> str | None:
    """What is wrong with `call` of `definition`; "unchecked: why" when a
    static check cannot tell."""
    node = definition.node
    if definition.kind == "function" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if not _plain(node):
            return "unchecked: decorated"
        return _signature_problem(definition, call, skip_self=False)
    if definition.kind == "class" and isinstance(node, ast.ClassDef):
        inits = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        if not inits:
            return "unchecked: class without its own __init__"
        return _signature_problem(Definition("function", definition.where, inits[-1]), call, skip_self=True)
    return f"unchecked: {definition.kind}"


def check(vllm_root: Path, flashinfer: FlashInferTree) -> Report:
    """Check every ``vllm/**.py`` under `vllm_root` against `flashinfer`."""
    report = Report()
    for path in sorted((vllm_root / "vllm").rglob("*.py")):
        text = path.read_text()
        if "flashinfer" not in text:
            continue
        tree = ast.parse(text, filename=str(path))
        where = path.relative_to(vllm_root)
        bound = _imports(tree, where, flashinfer, report)
        for node in ast.walk(tree) if bound else []:
            if not isinstance(node, ast.Call):
                continue
            dotted = _dotted(node.func)
            head, _, rest = dotted.partition(".")
            if head not in bound:
                continue
            target = bound[head] + (f".{rest}" if rest else "")
            definition = flashinfer.resolve_path(target)
            label = f"{where}:{node.lineno}: {target}"
            problem = "not found" if definition is None else _call_problem(definition, node)
            if problem and problem.startswith("unchecked: "):
                report.calls_unchecked.append(f"{label} ({problem.removeprefix('unchecked: ')})")
                continue
            if definition is not None:
                report.calls_checked += 1
            if problem:
                where_defined = f" ({definition.where})" if definition is not None else ""
                report.problems.append(f"{label}{where_defined}: {problem}")
    return report
