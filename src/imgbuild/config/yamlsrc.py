"""YAML loading that remembers where every value came from, so that config errors name `file:line:col`."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

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
        for key in without_tags(self.root, loc):
            child = _child(node, key)
            if child is None:
                break
            node = child
        if node is None:
            return str(self.path)
        mark = node.start_mark
        return f"{self.path}:{mark.line + 1}:{mark.column + 1}"


def without_tags(root: yaml.Node | None, loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """`loc` without the union tags pydantic puts in it (source.wheel.x is `source: {kind: wheel, x: ...}`)."""
    node, kept = root, []
    for key in loc:
        child = _child(node, key)
        if child is None and isinstance(node, yaml.MappingNode) and any(v.value == key for _, v in node.value):
            continue  # the value of the discriminator, not a key
        kept.append(key)
        node = child
    return tuple(kept)


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
    loader = yaml.SafeLoader(text)  # parsed once: the nodes (for `where`), then the data made from them
    try:
        root = loader.get_single_node()  # what yaml.compose does
        data = None if root is None else loader.construct_document(root)  # what yaml.safe_load does
    except yaml.YAMLError as exc:
        raise yaml_error(path, text, exc) from exc
    finally:
        loader.dispose()
    _refuse_duplicate_keys(path, root)
    return YamlDoc(path, data, root)


QUOTES = {'"': "double", "'": "single"}
ESCAPED = {'"': '\\"', "'": "''"}
CLOSERS = {"[": "]", "{": "}"}


def yaml_error(path: Path | str, text: str, exc: yaml.YAMLError) -> ConfigError:
    """A ConfigError where the fix goes: where an unclosed quote or bracket opens (PyYAML stops lines later, where
    the damage shows), else where PyYAML stopped."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return ConfigError(f"{path}: invalid YAML: {exc}", hint="fix the YAML syntax")
    mark, problem = exc.problem_mark, exc.problem or "syntax error"
    stopped = f"PyYAML stops at line {mark.line + 1}, column {mark.column + 1} ({problem})"
    quoted, flow = _opened(text, mark)
    if quoted is None and exc.context == "while scanning a quoted scalar" and exc.context_mark is not None:
        opens = text[exc.context_mark.index : exc.context_mark.index + 1]
        quoted = exc.context_mark, opens if opens in QUOTES else '"'
    if quoted is not None:
        at, char = quoted
        return ConfigError(
            f"{path}:{at.line + 1}:{at.column + 1}: invalid YAML: unclosed quote: the {QUOTES[char]}-quoted "
            f"string that opens here is never closed on its line; {stopped}",
            hint=f"close the quote: add the missing {char} at the end of the value on line {at.line + 1}"
            f" (a {char} inside a {QUOTES[char]}-quoted value is written {ESCAPED[char]})",
        )
    if flow is not None:
        at, char = flow
        return ConfigError(
            f"{path}:{at.line + 1}:{at.column + 1}: invalid YAML: unclosed flow collection: the {char} that opens "
            f"here has no {CLOSERS[char]}; {stopped}",
            hint=f"add the missing {CLOSERS[char]} for the {char} at line {at.line + 1}, column {at.column + 1}",
        )
    context = f" ({exc.context})" if exc.context else ""
    return ConfigError(
        f"{path}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {problem}{context}",
        hint="fix the YAML syntax at that line and column",
    )


Opened = tuple[yaml.Mark, str] | None


def _opened(text: str, problem: yaml.Mark) -> tuple[Opened, Opened]:
    """What is open where PyYAML stopped, each as (where it opens, its character): a quoted value just before
    the error that runs over a line end (a quote left open), and the innermost `[` or `{` not closed."""
    last: yaml.Token | None = None
    flows: list[yaml.Token] = []
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.index >= problem.index:
                break
            last = token
            if isinstance(token, yaml.FlowSequenceStartToken | yaml.FlowMappingStartToken):
                flows.append(token)
            elif isinstance(token, yaml.FlowSequenceEndToken | yaml.FlowMappingEndToken) and flows:
                flows.pop()
    except yaml.YAMLError:
        pass
    quote: Opened = None
    if (
        isinstance(last, yaml.ScalarToken)
        and last.style in QUOTES
        and last.end_mark.line > last.start_mark.line
        and last.end_mark.index <= problem.index
    ):
        quote = last.start_mark, str(last.style)
    flow: Opened = None
    if flows:
        flow = flows[-1].start_mark, "[" if isinstance(flows[-1], yaml.FlowSequenceStartToken) else "{"
    return quote, flow


def _refuse_duplicate_keys(path: Path, node: yaml.Node | None) -> None:
    """YAML says keys are unique; PyYAML keeps the last one silently. Refuse, naming both lines."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[object, yaml.Node] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name is not None and name in seen:
                first = seen[name].start_mark.line + 1
                raise ConfigError(
                    f"{path}:{key.start_mark.line + 1}:{key.start_mark.column + 1}: duplicate key {name!r} "
                    f"(first at line {first})",
                    hint=f"keep one of lines {first} and {key.start_mark.line + 1}; YAML keys must be unique",
                )
            if name is not None:
                seen[name] = key
            _refuse_duplicate_keys(path, value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(path, item)


M = TypeVar("M", bound=BaseModel)


def _tagged(models: list[type[BaseModel]], tag: str) -> type[BaseModel] | None:
    """The member of a tagged union whose Literal field has the value `tag`."""
    for m in models:
        for f in m.model_fields.values():
            if get_origin(f.annotation) is Literal and tag in get_args(f.annotation):
                return m
    return None


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Field names (and aliases) of the (nested) model that `loc` points into."""
    current: list[type[BaseModel]] = [model]
    keyed = False  # the previous field was a dict: this part is one of its keys
    for part in loc:
        if keyed or isinstance(part, int) or not current:
            keyed = False
            continue
        member = _tagged(current, str(part)) if len(current) > 1 else None
        if member is not None:
            current = [member]
            continue
        fields = current[0].model_fields
        field_info = fields.get(str(part)) or next((f for f in fields.values() if f.alias == part), None)
        if field_info is None:
            break
        annotation: Any = field_info.annotation
        keyed = get_origin(annotation) is dict
        current = [a for a in (*get_args(annotation), annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    if len(current) != 1:
        return []
    return [f.alias or name for name, f in current[0].model_fields.items()]


def validate(doc: YamlDoc, model: type[M]) -> M:
    """Validate `doc` against `model`; errors name file:line:col and what was expected."""
    if not isinstance(doc.data, dict):
        raise ConfigError(f"{doc.path}: expected a mapping at the top level, found {type(doc.data).__name__}")
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        errors = exc.errors()
        meant: set[tuple[int | str, ...]] = set()  # required fields an unknown key is a misspelling of
        for err in errors:
            loc = tuple(err["loc"])
            if err["type"] == "extra_forbidden":
                close = difflib.get_close_matches(str(loc[-1]), _fields_at(model, loc[:-1]), n=1, cutoff=0.6)
                meant.update((*loc[:-1], c) for c in close)
        lines = []
        for err in errors:
            loc = tuple(err["loc"])
            if err["type"] == "missing" and loc in meant:
                continue  # said once, at the misspelled key's own line
            dotted = ".".join(str(p) for p in without_tags(doc.root, loc)) or "(top level)"
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                known = _fields_at(model, loc[:-1])
                msg = f"unknown key {str(loc[-1])!r}{did_you_mean(str(loc[-1]), known)}"
            lines.append(f"{doc.where(loc)}: {dotted}: {msg}")
        raise ConfigError(
            "\n".join(lines), hint=f"see docs/configuration.md for the schema of {doc.path.name}"
        ) from exc
