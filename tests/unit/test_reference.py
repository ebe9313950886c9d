"""docs/reference.md is what the code makes of itself (`python3 -m imgbuild.cli.reference`): every command and
option, the exit codes and the --json documents. `.ci/run` makes the same comparison before the tiers run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main

from imgbuild import errors, jsondoc
from imgbuild.cli.app import app
from imgbuild.cli.reference import reference
from imgbuild.report.reference import REGENERATE, error_classes, walk

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "reference.md"


def test_docs_reference_is_what_the_code_generates() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == reference(ROOT), (
        f"docs/reference.md differs from the code: regenerate it from the repository root with `{REGENERATE}`"
    )


def test_the_reference_depends_on_no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    text = reference(ROOT)
    for name, value in {"COLUMNS": "30", "LINES": "5", "FORCE_COLOR": "1", "TERM": "xterm-256color"}.items():
        monkeypatch.setenv(name, value)
    assert reference(ROOT) == text
    assert "\x1b" not in text


def test_every_command_and_option_of_the_app_is_in_it() -> None:
    text = reference(ROOT)
    found = list(walk(typer.main.get_command(app)))  # type: ignore[arg-type]
    assert len(found) > 15 and any(ctx.command_path == "imgbuild patches bump" for _, ctx in found)
    for command, ctx in found:
        assert f"### `{ctx.command_path}`" in text
        for param in command.get_params(ctx):
            record = param.get_help_record(ctx)  # type: ignore[attr-defined]
            assert record and f"| `{record[0].replace('|', chr(92) + '|')}` |" in text, (ctx.command_path, record)


def test_every_exit_code_has_one_error_class_that_says_when() -> None:
    classes = error_classes()
    codes = [cls.exit_code for cls in classes]
    assert len(codes) == len(set(codes)) and set(codes) == set(range(1, 12))
    assert all(cls.__doc__ for cls in classes), [cls.__name__ for cls in classes if not cls.__doc__]
    text = reference(ROOT)
    for cls in classes:
        assert f"| {cls.exit_code} | `{cls.__name__}` |" in text
    assert f"| {errors.INTERRUPTED_EXIT} | `Interrupted` |" in text


def test_every_json_document_is_listed_with_its_schema_file() -> None:
    text = reference(ROOT)
    for name, version in jsondoc.VERSIONS.items():
        schema = json.loads((ROOT / "docs" / "schema" / f"{name}.v{version}.json").read_text())
        row = next(line for line in text.splitlines() if line.startswith(f"| `{jsondoc.schema_id(name)}` |"))
        assert f"(schema/{name}.v{version}.json)" in row
        assert all(f"`{key}`" in row for key in schema["required"] if key != "schema")
