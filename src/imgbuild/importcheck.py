"""Which modules smoke imports: the planned files, and the release's modules that import them.

Found statically (pure): every `import` and `from ... import` statement of a
release file is resolved to absolute module names (relative imports against
the file's package) and compared with the planned modules. Dynamic imports
(`importlib.import_module(name)`) are not followed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol


def module_name(path: str) -> str | None:
    """`vllm/models/engram.py` -> `vllm.models.engram`; a package's `__init__.py` -> the package; else None."""
    if not path.endswith(".py"):
        return None
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def imported_names(source: bytes, path: str) -> set[str]:
    """Every module name an import statement of `path` may load; names after `from X import` as `X.name` too.

    A file that does not parse imports nothing here (byte-compiling reports it).
    """
    module = module_name(path)
    if module is None:
        return set()
    package = module if path.endswith("/__init__.py") else module.rpartition(".")[0]
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, package)
            if base is None:
                continue
            if base:
                out.add(base)
            out.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names if alias.name != "*")
    return out


def _resolve(name: str | None, level: int, package: str) -> str | None:
    """The absolute module of `from <level dots><name> import ...` in `package`; None if it climbs too far."""
    if level == 0:
        return name or None
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    anchor = parts[: len(parts) - (level - 1)]
    return ".".join([*anchor, *([name] if name else [])])


def imports_any(names: Iterable[str], targets: set[str]) -> bool:
    """Whether loading `names` loads one of `targets` (a submodule loads its packages first)."""
    for name in names:
        parts = name.split(".")
        if any(".".join(parts[:i]) in targets for i in range(1, len(parts) + 1)):
            return True
    return False


def importers(sources: Mapping[str, bytes], targets: Sequence[str]) -> list[str]:
    """Modules of `sources` (path -> bytes) that import one of `targets` directly, sorted; the targets excluded."""
    wanted = set(targets)
    found = set()
    for path, data in sources.items():
        name = module_name(path)
        if name is None or name in wanted:
            continue
        if imports_any(imported_names(data, path), wanted):
            found.add(name)
    return sorted(found)


def leaf_words(targets: Sequence[str]) -> list[str]:
    """Words every importer of `targets` must contain (a cheap filter before parsing)."""
    return sorted({t.rpartition(".")[2] for t in targets})


def modules_to_import(files: Sequence[str], importer_modules: Sequence[str]) -> list[str]:
    """The planned files' modules (in plan order), then their importers."""
    own = [m for m in (module_name(f) for f in files) if m is not None]
    return list(dict.fromkeys([*own, *importer_modules]))


class Release(Protocol):
    """What `release_importers` reads: a release tree that can grep and read (gitio.CommitTree)."""

    def grep(self, words: Iterable[str], under: str) -> list[str]: ...
    def prefetch(self, paths: Iterable[str]) -> None: ...
    def read(self, path: str) -> bytes | None: ...


def release_importers(tree: Release, files: Sequence[str], package_root: str) -> list[str]:
    """The modules of the release under `package_root` that import one of the planned `files`' modules."""
    targets = [m for m in (module_name(f) for f in files) if m is not None]
    if not targets:
        return []
    candidates = [p for p in tree.grep(leaf_words(targets), package_root) if p.endswith(".py")]
    tree.prefetch(candidates)
    sources = {p: data for p in candidates if (data := tree.read(p)) is not None}
    return importers(sources, targets)
