"""docs/reference.md, rendered from the code: every command of the typer app with its own help text, arguments
and options (the click command tree, as `--help` reads it); the exit codes (the error classes of errors.py); the
`--json` documents (jsondoc.VERSIONS, and the schema files in docs/schema/).

Rendering only: `cli/reference.py` hands it the app's command and the schema directory. The output depends on
nothing else (no terminal width, no colour), so `.ci/run` and tests/unit/test_reference.py can compare it with the
committed file."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from pathlib import Path

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from imgbuild import errors, jsondoc

REGENERATE = "python3 -m imgbuild.cli.reference > docs/reference.md"

Command = TyperCommand | TyperGroup

INTRO = f"""\
# Reference

<!-- Generated from the code: `{REGENERATE}`.
Do not edit by hand: .ci/run and tests/unit/test_reference.py fail when it differs from what the code makes. -->

Every command and option as `--help` gives it, the exit codes and the `--json` documents, generated from the
code: the typer app (`src/imgbuild/cli/`), the error classes (`src/imgbuild/errors.py`) and the table of
documents (`src/imgbuild/jsondoc.py`) with their schemas (`docs/schema/`). What the commands do, step by step,
is in the guides the [README](../README.md) links to.

- [Commands](#commands)
- [Exit codes](#exit-codes)
- [JSON documents](#json-documents)
"""

COMMANDS = """\
## Commands

Every command takes `--json` and `--help` (which explains it, with examples). `-C DIR`/`--project DIR` (or
`$IMGBUILD_PROJECT`) picks the project; the other environment variables are in
[configuration](configuration.md#environment).
"""

EXIT_CODES = """\
## Exit codes

Exit codes are stable, one error type each (`src/imgbuild/errors.py`). Every error is printed in one place,
as `error: MESSAGE` and `hint: HINT` on stderr; under `--json` also as the `imgbuild.error/1` document on
stdout, whose `error.type` and `error.exit_code` are the first two columns below.
"""

JSON_DOCUMENTS = """\
## JSON documents

Under `--json` stdout is exactly one JSON document: the command's own, or `{"error": {"type", "message",
"hint", "exit_code", ...}}` (`imgbuild.error/1`) when the command fails (a failed check prints its own report
instead, with `"ok": false`). Every document carries a top-level `"schema": "imgbuild.<name>/<N>"`, and
`docs/schema/<name>.v<N>.json` (JSON Schema 2020-12) describes it: the keys always present and their types
(more keys may appear). A change to a document's shape (a key removed, renamed, retyped or moved) bumps its
N, with a new schema file and an entry in [CHANGELOG.md](../CHANGELOG.md); a reader checks the name and N it
expects (the sparkrun builder plugin does). The table of names and versions is `src/imgbuild/jsondoc.py`.

Not `--json` documents, and unversioned here: files written to disk (`buildkit/docker-bake.json`,
`images.lock`, a rebase's `state.json`, the review report's JSON).
"""


def render(app: Command, schema_dir: Path) -> str:
    """The whole of docs/reference.md."""
    parts = [INTRO, COMMANDS, *_commands(app), EXIT_CODES, _exit_codes(), JSON_DOCUMENTS, _documents(schema_dir)]
    return "\n".join(part.rstrip("\n") + "\n" for part in parts)


# Commands


def walk(command: Command, name: str = "imgbuild") -> Iterator[tuple[Command, typer.Context]]:
    """Each command that is not hidden, with its context (for its params and usage), the group before its
    subcommands, in the order `--help` lists them."""
    return _walk(command, typer.Context(command, info_name=name))


def _walk(command: Command, ctx: typer.Context) -> Iterator[tuple[Command, typer.Context]]:
    yield command, ctx
    if isinstance(command, TyperGroup):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if isinstance(sub, TyperCommand | TyperGroup) and not sub.hidden:
                yield from _walk(sub, typer.Context(sub, info_name=sub_name, parent=ctx))


def _commands(app: Command) -> Iterator[str]:
    found = list(walk(app))
    yield "\n".join(
        f"{'  ' * (len(ctx.command_path.split()) - 1)}- [`{ctx.command_path}`](#{_anchor(ctx.command_path)})"
        for _, ctx in found
    )
    for command, ctx in found:
        yield _command(command, ctx)


def _command(command: Command, ctx: typer.Context) -> str:
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    out = [f"### `{ctx.command_path}`", "", "```", usage, "```", ""]
    out += _help_markdown(command.help or "")
    if isinstance(command, TyperGroup):
        subs = [n for n in command.list_commands(ctx) if not _hidden(command.get_command(ctx, n))]
        out += ["Commands: " + ", ".join(f"[`{n}`](#{_anchor(f'{ctx.command_path} {n}')})" for n in subs) + ".", ""]
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, TyperArgument | TyperOption) else None
        if record is not None:
            rows.append(f"| `{_cell(record[0])}` | {_cell(_escape(record[1]))} |")
    if rows:
        out += ["| argument or option | |", "|---|---|", *rows, ""]
    return "\n".join(out)


def _hidden(command: object) -> bool:
    return not isinstance(command, TyperCommand | TyperGroup) or command.hidden


def _help_markdown(text: str) -> list[str]:
    """A command's help as Markdown: a paragraph of prose joined into one line (click rewraps it too), and
    indented lines (examples) as one code block, as `--help` shows them."""
    out: list[str] = []
    code: list[str] = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines = paragraph.splitlines()
        prose = []
        while lines and not lines[0].startswith(" "):
            prose.append(lines.pop(0).strip())
        if prose and code:
            out += ["```", *code, "```", ""]
            code = []
        if prose:
            out += [_escape(" ".join(prose)), ""]
        if lines:
            indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
            code += ([""] if code else []) + [line[indent:] for line in lines]
    if code:
        out += ["```", *code, "```", ""]
    return out


# Exit codes


def error_classes() -> list[type[errors.ImgbuildError]]:
    """The error classes errors.py defines (the base excepted), by exit code: one class per code."""
    found = [
        value
        for value in vars(errors).values()
        if isinstance(value, type)
        and issubclass(value, errors.ImgbuildError)
        and value is not errors.ImgbuildError
        and value.__module__ == errors.__name__
    ]
    return sorted(found, key=lambda cls: cls.exit_code)


def _exit_codes() -> str:
    rows = ["| exit | error type | when |", "|---|---|---|", f"| {errors.ExitCode.OK} | | success |"]
    for cls in error_classes():
        rows.append(f"| {cls.exit_code} | `{cls.__name__}` | {_cell(_escape(inspect.getdoc(cls) or ''))} |")
    rows.append(f'| {errors.INTERRUPTED_EXIT} | `Interrupted` | Ctrl-C ("{errors.INTERRUPTED}") |')
    return "\n".join(rows) + "\n"


# JSON documents


def _documents(schema_dir: Path) -> str:
    rows = ["| document | schema | printed by | keys always present |", "|---|---|---|---|"]
    for name, version in jsondoc.VERSIONS.items():
        file = f"{name}.v{version}.json"
        schema = json.loads((schema_dir / file).read_text(encoding="utf-8"))
        required = [key for key in schema.get("required", []) if key != "schema"]  # `schema`: in every document
        keys = ", ".join(f"`{key}`{_type(schema['properties'].get(key, {}))}" for key in required)
        rows.append(
            f"| `{jsondoc.schema_id(name)}` | [{file}](schema/{file}) "
            f"| {_cell(_escape(schema.get('description', '')))} | {_cell(keys)} |"
        )
    current = {f"{name}.v{version}.json" for name, version in jsondoc.VERSIONS.items()}
    older = sorted(p.name for p in schema_dir.glob("*.json") if p.name not in current)
    tail = ""
    if older:
        tail = "\nEarlier versions, kept for the readers of them: " + ", ".join(f"[{f}](schema/{f})" for f in older)
        tail += ".\n"
    return "\n".join(rows) + "\n" + tail


def _type(prop: dict[str, object]) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = " or ".join(str(k) for k in kind)
    if "const" in prop:
        return f" ({json.dumps(prop['const'])})"
    values = prop.get("enum")
    if isinstance(values, list):
        return " (" + " or ".join(json.dumps(value) for value in values) + ")"
    return f" ({kind})" if isinstance(kind, str) else ""


# Markdown


def _escape(text: str) -> str:
    """Prose as Markdown: outside `code`, `*`, `_` at a word's edge, `<` and `\\` are literal characters."""
    if text.count("`") % 2:  # an unpaired backtick is a literal one
        head, _, tail = text.rpartition("`")
        return _escape(head) + "\\`" + _escape(tail)
    pieces = text.split("`")
    for i in range(0, len(pieces), 2):
        piece = pieces[i].replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;")
        pieces[i] = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", piece)
    return "`".join(pieces)


def _cell(text: str) -> str:
    """A table cell: one line, `|` escaped (inside `code` too, as GitHub's tables read it)."""
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading `### \\`heading\\``."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
