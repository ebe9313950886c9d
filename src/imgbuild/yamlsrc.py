"""YAML loading that remembers where every value came from.

Pydantic reports errors by key path; `YamlDoc.where(loc)` turns such a path
into `file:line:col`, so config errors point at the exact spot to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from imgbuild.errors import ConfigError, did_you_mean


@dataclass
class YamlDoc:
    path: Path
    data: Any
    root: yaml.Node | None = field(default=None, repr=False)

    def where(self, loc: tuple[int | str, ...]) -> str:
        node = self.root
        for key in loc:
            child = _child(node, key)
            if child is None:
                break
            node = child
        if node is None:
            return str(self.path)
        mark = node.start_mark
        return f"{self.path}:{mark.line + 1}:{mark.column + 1}"


def _child(node: yaml.Node | None, key: int | str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == key:
                return v  # type: ignore[no-any-return]
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
        return node.value[key]  # type: ignore[no-any-return]
    return None


def load_yaml(path: Path) -> YamlDoc:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: file not found") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(
            f"{where}: invalid YAML: {exc.problem}" + (f" ({exc.context})" if exc.context else ""),
            hint="fix the YAML syntax at that line and column",
        ) from exc
    return YamlDoc(path, data, root)


M = TypeVar("M", bound=BaseModel)


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Field names (and aliases) of the (nested) model that `loc` points into."""
    current: Any = model
    keyed = False  # the previous field was a dict: this part is one of its keys
    for part in loc:
        if keyed or isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            keyed = False
            continue
        field_info = current.model_fields.get(str(part))
        if field_info is None:
            field_info = next((f for f in current.model_fields.values() if f.alias == part), None)
        if field_info is None:
            break
        annotation = field_info.annotation
        keyed = get_origin(annotation) is dict
        nested = [a for a in (*get_args(annotation), annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        current = nested[0] if nested else None
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return []
    return [f.alias or name for name, f in current.model_fields.items()]


def validate(doc: YamlDoc, model: type[M]) -> M:
    """Validate `doc` against `model`; errors name file:line:col and what was expected."""
    if not isinstance(doc.data, dict):
        raise ConfigError(f"{doc.path}: expected a mapping at the top level, found {type(doc.data).__name__}")
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            dotted = ".".join(str(p) for p in loc) or "(top level)"
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                known = _fields_at(model, loc[:-1])
                msg = f"unknown key {str(loc[-1])!r}{did_you_mean(str(loc[-1]), known)}"
            lines.append(f"{doc.where(loc)}: {dotted}: {msg}")
        raise ConfigError(
            "\n".join(lines), hint=f"see docs/configuration.md for the schema of {doc.path.name}"
        ) from exc
