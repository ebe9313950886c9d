"""Which modules smoke imports: the planned files, and the release's modules importing them (static `ast`
resolution of import statements; dynamic imports are not followed). A release's importers are kept under
`<cache>/importers/` by commit, files and this module's code: a commit never changes, and finding them reads and
parses the release's candidates (about 2 s for vLLM's, before the container can start)."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from imgbuild.atomic import write_json
from imgbuild.cache import cache_dir

if TYPE_CHECKING:
    from imgbuild.upstream.git import CommitTree

RULES = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()  # a change to how importers are found finds anew


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
    """Every module an import statement of `path` may load (`from X import n`: `X` and `X.n`)."""
    module = module_name(path)
    if module is None:
        return set()
    package = module if path.endswith("/__init__.py") else module.rpartition(".")[0]
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    for node in _executed(tree.body):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            try:  # `from <level dots><module> import ...` in `package`
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            except ImportError:  # it climbs out of the tree
                continue
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def _executed(body: Sequence[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements importing a module runs: not function bodies, not `if TYPE_CHECKING:` blocks."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        if isinstance(node, ast.If):
            if ast.unparse(node.test).rpartition(".")[2] != "TYPE_CHECKING":
                yield from _executed(node.body)
            yield from _executed(node.orelse)
        elif isinstance(node, ast.Try | ast.TryStar):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _executed(part)
        elif isinstance(node, ast.ClassDef | ast.With):
            yield from _executed(node.body)


def importers(sources: Mapping[str, bytes], targets: Sequence[str]) -> list[str]:
    """Modules of `sources` (path -> bytes) that import one of `targets` directly, sorted; the targets excluded."""
    wanted = set(targets)
    found = set()
    for path, data in sources.items():
        name = module_name(path)
        if name is None or name in wanted:
            continue
        # a submodule loads its packages first
        loaded = {n.rsplit(".", i)[0] for n in imported_names(data, path) for i in range(n.count(".") + 1)}
        if loaded & wanted:
            found.add(name)
    return sorted(found)


def needles(path: str) -> tuple[str, dict[str, str]]:
    """(leaf, directory -> word): what a direct importer of `path` must spell (from outside `a/b/`,
    `a/b/c/mod.py` is imported as `b.c.mod`, relative or not)."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    leaf, dirs = parts[-1], parts[:-1]
    words = {"/".join(dirs): leaf}
    for k in range(len(dirs) - 1, 0, -1):  # the tree above dirs[k], minus what is already covered
        words["/".join(dirs[:k])] = ".".join(dirs[k:])
    return leaf, words


def candidate(path: str, data: bytes, planned: str) -> bool:
    """Whether `path` (with `data`) may import the planned file directly (a filter before parsing)."""
    leaf, words = needles(planned)
    if leaf.encode() not in data:
        return False
    inside = [d for d in words if path.startswith(d + "/")]
    deepest = max(inside, key=len) if inside else None
    return deepest is not None and words[deepest].encode() in data


def modules_to_import(files: Sequence[str], importer_modules: Sequence[str]) -> list[str]:
    """The planned files' modules (in plan order), then their importers."""
    own = [m for m in (module_name(f) for f in files) if m is not None]
    return list(dict.fromkeys([*own, *importer_modules]))


def release_importers(tree: CommitTree, files: Sequence[str], package_root: str) -> list[str]:
    """The modules of the release under `package_root` that import one of the planned `files`' modules."""
    targets = [m for m in (module_name(f) for f in files) if m is not None]
    if not targets:
        return []
    leaves = sorted({needles(f)[0] for f in files})
    paths = [p for p in tree.grep(leaves, package_root) if p.endswith(".py")]
    tree.prefetch(paths)
    sources = {}
    for path in paths:
        data = tree.read(path)
        if data is not None and any(candidate(path, data, f) for f in files):
            sources[path] = data
    return importers(sources, targets)


def kept_release_importers(
    tree: CommitTree, files: Sequence[str], package_root: str, cache: Path | None = None
) -> list[str]:
    """release_importers, kept in the cache (best effort: an unreadable or unwritable entry is found again)."""
    key = json.dumps([RULES, tree.commit, package_root, sorted(files)])
    path = (cache or cache_dir()) / "importers" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads(path.read_text())
        if isinstance(kept, list) and all(isinstance(m, str) for m in kept):
            return kept
    found = release_importers(tree, files, package_root)
    with contextlib.suppress(OSError):
        write_json(path, found)
    return found
