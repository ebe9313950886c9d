"""The `--json` documents' types (src/imgbuild/report/documents/) are the contract: docs/schema/ is generated from
them (no drift), each name of jsondoc.VERSIONS has one, and a document prints as its schema says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from imgbuild import jsondoc
from imgbuild.report.documents import all_documents, schema_files
from imgbuild.report.documents.__main__ import main
from imgbuild.report.documents.images import LockCheck
from imgbuild.report.documents.patches import PatchesRebaseAbort
from tests.support.jsonschema_check import SCHEMA_DIR, load_json


def test_the_committed_schemas_are_the_ones_the_types_make() -> None:
    for name, text in schema_files().items():
        path = SCHEMA_DIR / name
        assert path.is_file() and path.read_text(encoding="utf-8") == text, (
            f"docs/schema/{name} differs from its type: run python3 -m imgbuild.report.documents --write docs/schema"
        )


def test_the_generator_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", str(SCHEMA_DIR)]) == 0
    assert main(["--write", str(tmp_path)]) == 0 and main(["--check", str(tmp_path)]) == 0
    (tmp_path / "lock-check.v1.json").write_text("{}\n")
    assert main(["--check", str(tmp_path)]) == 1
    assert "lock-check.v1.json: differs from its type" in capsys.readouterr().err


def test_one_type_per_document_of_the_table() -> None:
    assert [c.name for c in all_documents()] == list(jsondoc.VERSIONS)


def test_a_document_prints_schema_first_and_refuses_keys_its_type_does_not_name() -> None:
    doc = load_json(PatchesRebaseAbort(ok=True, message="aborted").render(), expect="patches-rebase-abort")
    assert list(doc) == ["schema", "ok", "message"]
    assert json.loads(LockCheck.of({"ok": False, "problems": ["stale"]}).render())["problems"] == ["stale"]
    with pytest.raises(ValidationError):
        LockCheck.of({"ok": True, "problems": [], "more": 1})
    with pytest.raises(ValidationError):
        LockCheck.of({"ok": True})


def test_the_interrupted_document_is_the_error_type() -> None:
    """cli/main.py prints it with the standard library only (a Ctrl-C may leave a module half imported)."""
    from imgbuild.errors import INTERRUPTED, error_json
    from imgbuild.report.documents.deploy import Error

    body = error_json("Interrupted", INTERRUPTED, None, 130)
    assert Error.of(body).document() == jsondoc.document("error", body)
