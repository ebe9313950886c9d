"""The --json contract: the version table (jsondoc.VERSIONS), the committed schemas (docs/schema/), and
the commands that print the documents agree."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from imgbuild import jsondoc
from imgbuild.report.documents import all_documents, bump, deploy, images, patches  # bump: gitpython, at collection
from tests.support.jsonschema_check import SCHEMA_DIR, load_json, schema_path

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "src" / "imgbuild" / "cli"


def test_every_schema_file_is_a_valid_2020_12_schema_of_its_own_id() -> None:
    files = sorted(SCHEMA_DIR.glob("*.json"))
    assert files
    for path in files:
        schema = json.loads(path.read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", path.name
        Draft202012Validator.check_schema(schema)
        name, _, version = path.name.removesuffix(".json").rpartition(".v")
        sid = f"imgbuild.{name}/{version}"
        assert schema["title"] == sid and schema["properties"]["schema"] == {"const": sid}, path.name
        assert "schema" in schema["required"], path.name


def test_every_document_of_the_table_has_a_schema_file_and_every_file_a_document() -> None:
    files = {p.name for p in SCHEMA_DIR.glob("*.json")}
    expected = {f"{name}.v{n}.json" for name, n in jsondoc.VERSIONS.items()}
    assert expected - files == set(), "documents without a schema file"
    for extra in files - expected:  # an older version of a document is kept; nothing else
        name, _, version = extra.removesuffix(".json").rpartition(".v")
        assert name in jsondoc.VERSIONS and int(version) < jsondoc.VERSIONS[name], f"no such document: {extra}"
    for name in jsondoc.VERSIONS:
        assert schema_path(jsondoc.schema_id(name)).is_file()


def test_every_print_json_in_the_cli_prints_a_document_type_of_the_table() -> None:
    """Each `print_json(docs.X(...))` or `print_json(docs.X.of(...))` in cli/ names a document type or contract
    (report/documents/); every document but `error` (cli/main.py) is printed by a command."""
    documents = list(all_documents())
    types = {
        attr: c.name
        for module in (patches, bump, images, deploy)
        for attr, c in vars(module).items()
        if any(c is d for d in documents)
    }
    named = []
    for path in sorted(CLI.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print_json":
                first = node.args[0]
                choices = [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]
                for choice in choices:
                    assert isinstance(choice, ast.Call), f"{path.name}:{node.lineno}: print a document type"
                    func = choice.func
                    if isinstance(func, ast.Attribute) and func.attr == "of":
                        func = func.value
                    kind = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                    assert kind in types, f"{path.name}:{node.lineno}: {kind} is not a document type"
                    named.append(types[kind])
    assert set(jsondoc.VERSIONS) - set(named) == {"error"}


def test_document_puts_schema_first_and_readers_check_name_and_version() -> None:
    doc = jsondoc.document("build", {"images": []})
    assert list(doc) == ["schema", "images"] and doc["schema"] == "imgbuild.build/2"
    assert jsondoc.parse_id("imgbuild.patches-check/12") == ("patches-check", 12)
    assert jsondoc.parse_id("imgbuild.build/0") is None and jsondoc.parse_id(None) is None
    assert jsondoc.mismatch(doc, "build") is None
    assert "is 'imgbuild.build/2', and this reader reads 'imgbuild.build-plan/2'" in (
        jsondoc.mismatch(doc, "build-plan") or ""
    )
    assert "is 'imgbuild.build/3'" in (jsondoc.mismatch({**doc, "schema": "imgbuild.build/3"}, "build") or "")
    assert "carries no schema id" in (jsondoc.mismatch({"images": []}, "build") or "")


def test_load_json_refuses_a_document_that_does_not_match_its_schema() -> None:
    good = jsondoc.document("lock-check", {"ok": True, "problems": []})
    assert load_json(json.dumps(good), expect="lock-check") == good
    with pytest.raises(AssertionError, match="problems"):
        load_json(json.dumps({**good, "problems": "none"}))
    with pytest.raises(AssertionError, match="without a `schema` key"):
        load_json(json.dumps({"ok": True, "problems": []}))
    with pytest.raises(AssertionError, match="no schema file"):
        load_json(json.dumps({**good, "schema": "imgbuild.lock-check/99"}))
    with pytest.raises(AssertionError, match=r"expected an imgbuild\.bake-check document"):
        load_json(json.dumps(good), expect="bake-check")
