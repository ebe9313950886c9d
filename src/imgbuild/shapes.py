"""How a domain value prints under `--json`: the frozen dataclass is the document's shape (report/documents/), and
these are the few marks a field may carry to say how it prints. `dump` is the one way a value becomes JSON values
outside a document (an error's details).

An error prints as `ErrorReport` (the error document) or as a `Failure` field of another document (a bump's
`error`): `errors.ErrorBody` is standard library only (a Ctrl-C prints it with nothing else loaded), so the pydantic
side of it is here, as marks on those fields: the body prints as its `flat()` (the details beside the four keys),
and its schema names the four keys and allows more."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import Field, GetJsonSchemaHandler, JsonValue, PlainSerializer, TypeAdapter, WithJsonSchema
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from imgbuild.errors import ErrorBody


class MayBeNull:
    """The printed key may be null by the document's schema (its readers allow it), though this value never is."""

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"anyOf": [handler(schema), {"type": "null"}]}


NULLABLE = MayBeNull()

# seconds as printed: to the millisecond
Seconds = Annotated[float, PlainSerializer(lambda v: round(v, 3), return_type=float)]


# a path, printed as a plain string
PathText = Annotated[
    Path, PlainSerializer(str, return_type=str), WithJsonSchema({"type": "string"}, mode="serialization")
]

# a string printed as null when empty (e.g. no index for a one-platform image)
EmptyIsNull = Annotated[str, PlainSerializer(lambda v: v or None, return_type=str | None)]


def hidden() -> Any:
    """A field its documents never print (what the domain keeps beside them)."""
    return Field(exclude=True)


def omitted_unless_set(description: str) -> Any:
    """A key printed only when the value is set (not None): not required by the schema, `description` says when."""
    return Field(exclude_if=lambda v: v is None, description=description)


def added_later(description: str, *, null_default: bool = False) -> Any:
    """A key always printed that the schema does not require (added after its document's version: older
    printers left it out); `null_default`: the schema says its default is null."""
    marks: dict[str, JsonValue] = {ADDED_LATER: True, NULL_DEFAULT: True} if null_default else {ADDED_LATER: True}
    return Field(description=description, json_schema_extra=marks)


ADDED_LATER = "x-imgbuild-added-later"  # report/documents/ reads it (not required) and drops it from the schema


def null_unless_asked(description: str) -> Any:
    """A key always printed, null unless an option asked for it: the schema does not require it and says its
    default is null (e.g. `plan --bases`)."""
    return Field(description=description, json_schema_extra={ADDED_LATER: True, NULL_DEFAULT: True})


NULL_DEFAULT = "x-imgbuild-null-default"  # report/documents/ keeps the field's default (null) in the schema


def of_one_form(description: str | None = None) -> Any:
    """A key of a value printed in more than one form (its class's `model_serializer` leaves the key out of the
    others, e.g. a state that could not be read): the schema does not require it and gives its default."""
    return Field(description=description, json_schema_extra={ADDED_LATER: True, NULL_DEFAULT: True})


def derived(default: Any = False) -> Any:
    """A field its dataclass sets in `__post_init__` from its other fields (e.g. `ok`), declared where the document
    prints it; what a caller passes is replaced. (A property would print last; a keyword-only field too.)"""
    return field(default=default)


C = TypeVar("C", bound=type)

# class name -> the name its documents' schemas give it (`named`)
SCHEMA_NAMES: dict[str, str] = {}


def named(name: str) -> Callable[[C], C]:
    """A class decorator: the type is `name` in its documents' schemas (`$defs`), where its Python name is taken
    by another meaning in its module (e.g. a checked series entry beside patches/series.py's `SeriesEntry`)."""

    def mark(cls: C) -> C:
        SCHEMA_NAMES[cls.__name__] = name
        return cls

    return mark


def dump(value: object) -> Any:
    """`value` (a dataclass the documents print) as JSON values, as its documents print it."""
    return TypeAdapter(type(value)).dump_python(value, mode="json", by_alias=True)


class _MoreKeys:
    """The schema of `ErrorBody` as `flat()` prints it: its four keys (not `details`), and more allowed."""

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        body = handler.resolve_ref_schema(out)
        body["properties"].pop("details")
        body["required"] = [k for k in body.get("required", ()) if k != "details"]
        body["additionalProperties"] = True
        return out


def _flat(body: ErrorBody):  # type: ignore[no-untyped-def]  # no return annotation: the schema stays ErrorBody's
    return body.flat()


# an error's body as its documents print it
Failure = Annotated[ErrorBody, PlainSerializer(_flat), _MoreKeys()]


@dataclass(frozen=True)
class ErrorReport:
    """The failure document of any command under --json (printed by cli/main.py)."""

    error: Failure
