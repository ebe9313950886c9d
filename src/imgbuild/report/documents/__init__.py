"""The `--json` documents as types: one per name of `jsondoc.VERSIONS`.

The domain result is the contract. A `Contract` names a frozen domain dataclass (the value a command's library call
returns, or what one method next to it makes of it, e.g. `Bump.shown()`) as a document: `Contract.of(value)`
prints it as it is (`Printed.render`, the one place a document becomes JSON: `{"schema": "imgbuild.<name>/<N>",
...fields}`), and `docs/schema/<name>.v<N>.json` is generated from that dataclass by pydantic's `TypeAdapter`
(`Annotated[..., Field(description=...)]` on a field describes its key; the marks of `shapes.py` say how a field
prints), written by `python3 -m imgbuild.report.documents --write docs/schema` and checked for drift by
tests/unit/test_documents.py. No class here repeats a domain type's fields.

A key that is only sometimes printed is left out when not set (`shapes.omitted_unless_set`); every other key is
always printed. Generated schemas allow more keys (`additionalProperties` is not closed): a key added later does
not bump a document's version, a changed or removed one does (jsondoc.py).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from imgbuild import jsondoc
from imgbuild.shapes import ADDED_LATER, NULL_DEFAULT, SCHEMA_NAMES

DRAFT = "https://json-schema.org/draft/2020-12/schema"


class _Shapes(GenerateJsonSchema):
    """A domain dataclass's schema as its documents print it: every key is printed (required, no default) except
    one left out when empty (`Field(exclude_if=...)`), which keeps its default, and one added after its document's
    version (`shapes.added_later`: printed, not required; `shapes.null_unless_asked` also keeps its default)."""

    def field_is_required(
        self,
        field: core_schema.ModelField | core_schema.DataclassField | core_schema.TypedDictField,
        total: bool,  # noqa: ARG002 (the base class's signature)
    ) -> bool:
        later = field.get("metadata", {}).get("pydantic_js_extra", {})
        return field.get("serialization_exclude_if") is None and not (isinstance(later, dict) and ADDED_LATER in later)

    def dataclass_field_schema(self, schema: core_schema.DataclassField) -> JsonSchemaValue:
        inner = schema["schema"]
        extra = schema.get("metadata", {}).get("pydantic_js_extra", {})
        keeps_default = schema.get("serialization_exclude_if") is not None or (
            isinstance(extra, dict) and NULL_DEFAULT in extra
        )
        if inner["type"] == "default" and not keeps_default:
            return self.generate_inner(inner["schema"])
        return self.generate_inner(inner)


@dataclass(frozen=True)
class Contract:
    """A document that is a domain type plus its name (`jsondoc.VERSIONS`) and its description. The type is named
    `module:Class` and imported when the document is printed or its schema made: a command imports only the
    domain types of what it prints."""

    name: str
    shape_at: str
    description: str

    @cached_property
    def shape(self) -> type[Any]:
        module, _, attr = self.shape_at.partition(":")
        found = getattr(importlib.import_module(module), attr)
        assert isinstance(found, type), f"{self.shape_at}: not a type"
        return found

    @cached_property
    def _adapter(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.shape)

    def of(self, value: object) -> Printed:
        """The document of `value` (an instance of the type), ready to print."""
        if not isinstance(value, self.shape):
            raise TypeError(f"document {self.name} prints a {self.shape_at}, not a {type(value).__name__}")
        return Printed(self.name, self._adapter.dump_python(value, mode="json", by_alias=True))

    def json_schema(self) -> dict[str, Any]:
        raw = self._adapter.json_schema(by_alias=True, mode="serialization", schema_generator=_Shapes)
        if "$ref" in raw:  # a type that holds itself (a rebase's `earlier`): the document is its definition
            raw = {**raw["$defs"][raw.pop("$ref").removeprefix("#/$defs/")], "$defs": raw["$defs"]}
        return _document_schema(self.name, _renamed({**raw, "description": self.description}))


@dataclass(frozen=True)
class Printed:
    """A document's body as JSON values, with its name: what `print_json` prints."""

    name: str
    body: dict[str, Any]

    def document(self) -> dict[str, Any]:
        return jsondoc.document(self.name, self.body)

    def render(self) -> str:
        """The document as printed: `schema` first, two-space indents."""
        return json.dumps(self.document(), indent=2, sort_keys=False)


def _renamed(raw: dict[str, Any]) -> dict[str, Any]:
    """The schema with each `shapes.named` type under its schema name (`$defs` keys and `$ref`s), `$defs` sorted."""
    names = {old: new for old, new in SCHEMA_NAMES.items() if old in raw.get("$defs", {})}
    if not names:
        return raw

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in names:
            out["$ref"] = "#/$defs/" + names[ref[8:]]
        return out

    out: dict[str, Any] = walk(raw)
    defs = {names.get(k, k): v for k, v in out["$defs"].items()}
    out["$defs"] = dict(sorted(defs.items()))
    return out


def _document_schema(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """The printed document's schema from its body's: `schema` first, titles gone."""
    raw = _tidy(raw)
    sid = jsondoc.schema_id(name)
    props = {"schema": {"const": sid}, **raw.get("properties", {})}
    out: dict[str, Any] = {"$schema": DRAFT, "title": sid}
    if "description" in raw:
        out["description"] = raw["description"]
    out |= {"type": "object", "required": ["schema", *raw.get("required", [])], "properties": props}
    if "$defs" in raw:
        out["$defs"] = raw["$defs"]
    return out


def _tidy(node: Any, *, mapping: bool = False) -> Any:
    """Drop pydantic's generated titles and closed `additionalProperties` (a key may be added without a bump).
    `mapping`: `node` maps names to schemas (`properties`, `$defs`), whose keys are never dropped."""
    if isinstance(node, list):
        return [_tidy(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if not mapping and key == "title" and isinstance(value, str):
            continue
        if not mapping and key == "additionalProperties" and value is False:
            continue
        if not mapping and key in (ADDED_LATER, NULL_DEFAULT):
            continue
        if not mapping and key == "description" and isinstance(value, str):
            value = " ".join(value.split())  # a docstring's line breaks
        out[key] = _tidy(value, mapping=not mapping and key in ("properties", "$defs"))
    return out


def all_documents() -> Iterator[Contract]:
    """Every document, one per name of `jsondoc.VERSIONS`, in its order."""
    from imgbuild.report.documents import bump, deploy, images, patches

    by_name: dict[str, Contract] = {
        c.name: c
        for module in (patches, bump, images, deploy)
        for c in vars(module).values()
        if isinstance(c, Contract)
    }
    missing = set(jsondoc.VERSIONS) - set(by_name)
    assert not missing, f"documents without a type: {sorted(missing)}"
    for name in jsondoc.VERSIONS:
        yield by_name[name]


def schema_files() -> dict[str, str]:
    """File name (`<name>.v<N>.json`) -> its text, for every document at its current version."""
    return {
        f"{c.name}.v{jsondoc.VERSIONS[c.name]}.json": json.dumps(c.json_schema(), indent=2, ensure_ascii=False) + "\n"
        for c in all_documents()
    }
