"""The `--json` documents as types: one frozen pydantic model per document (one name of `jsondoc.VERSIONS`).

The model is the contract. A command builds its document's model and prints it with `render` (the one place a
document becomes JSON: `{"schema": "imgbuild.<name>/<N>", ...fields}`); `docs/schema/<name>.v<N>.json` is
generated from the model (`python3 -m imgbuild.report.documents --write docs/schema`, checked for drift by
tests/unit/test_documents.py). A key the model does not name, or one it needs that is missing, fails at the print.

A key that is only sometimes printed has a default and is left out when not given (`exclude_unset`); every other
key is always printed. Generated schemas allow more keys (`additionalProperties` is not closed): a key added
later does not bump a document's version, a changed or removed one does (jsondoc.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict

from imgbuild import jsondoc

DRAFT = "https://json-schema.org/draft/2020-12/schema"


class Part(BaseModel):
    """A piece of a document: frozen, no key it does not name."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Document(Part):
    """A whole document; `name` is its key in `jsondoc.VERSIONS`. The class docstring is the schema's description."""

    name: ClassVar[str]

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Self:
        """The document from a domain object's JSON body (its `to_json()`), checked against this type."""
        return cls.model_validate(body)

    def body(self) -> dict[str, Any]:
        """The document's keys, without `schema`, as JSON values."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def document(self) -> dict[str, Any]:
        return jsondoc.document(self.name, self.body())

    def render(self) -> str:
        """The document as printed: `schema` first, two-space indents."""
        return json.dumps(self.document(), indent=2, sort_keys=False)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of the printed document."""
        raw = cls.model_json_schema(by_alias=True, mode="serialization")
        raw = _tidy(raw)
        sid = jsondoc.schema_id(cls.name)
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
        if not mapping and key == "description" and isinstance(value, str):
            value = " ".join(value.split())  # a docstring's line breaks
        out[key] = _tidy(value, mapping=not mapping and key in ("properties", "$defs"))
    return out


def all_documents() -> Iterator[type[Document]]:
    """Every document type, one per name of `jsondoc.VERSIONS`, in its order."""
    from imgbuild.report.documents import deploy, images, patches

    by_name = {
        c.name: c
        for module in (patches, images, deploy)
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, Document) and c is not Document and "name" in vars(c)
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
