"""Every `--json` document a test reads is checked against its committed schema (docs/schema/), found
by the document's own `schema` key (`imgbuild.<name>/<N>` -> `docs/schema/<name>.v<N>.json`).

`load_json(stdout)` parses and validates; tests read `--json` output through it, success and failure
alike. `support.runner` also validates the stdout of every `--json` run it makes.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from imgbuild.jsondoc import parse_id

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "docs" / "schema"


def schema_path(schema_id: str) -> Path:
    parsed = parse_id(schema_id)
    assert parsed is not None, f"not an imgbuild schema id: {schema_id!r}"
    name, version = parsed
    return SCHEMA_DIR / f"{name}.v{version}.json"


@functools.cache
def validator(schema_id: str) -> Draft202012Validator:
    path = schema_path(schema_id)
    assert path.is_file(), f"{schema_id}: no schema file {path.relative_to(ROOT)}"
    schema = json.loads(path.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


# Every schema id this session validated (tests/conftest.py: a whole run of every tier must have seen each document).
SEEN: set[str] = set()


def validate(doc: object) -> None:
    """Fail (AssertionError) unless `doc` is an object whose `schema` names a committed schema it matches."""
    assert isinstance(doc, dict), f"a --json document is an object, not {type(doc).__name__}"
    schema_id = doc.get("schema")
    assert isinstance(schema_id, str), f"a --json document without a `schema` key: {sorted(doc)}"
    errors = sorted(validator(schema_id).iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, f"{schema_id}: " + "; ".join(
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in errors[:5]
    )
    SEEN.add(schema_id)


def load_json(text: str, expect: str | None = None) -> Any:
    """Parse one `--json` document (stdout) and validate it; with `expect`, its schema's name must be that."""
    doc = json.loads(text)
    validate(doc)
    if expect is not None:
        parsed = parse_id(doc["schema"])
        assert parsed is not None and parsed[0] == expect, f"expected an imgbuild.{expect} document: {doc['schema']}"
    return doc
