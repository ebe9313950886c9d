"""The `--json` contract: every document a command prints under `--json` carries `"schema": "imgbuild.<name>/<N>"`,
and this table names each document and its version. A change to a document's shape bumps its N, and
`docs/schema/<name>.v<N>.json` describes it (generated from the document's type, report/documents/).
Standard library only: the sparkrun builder plugin reads it too."""

from __future__ import annotations

import re
from collections.abc import Mapping

PREFIX = "imgbuild."

# Each document printed under --json -> its version. One name per shape: a command that prints two
# shapes (e.g. `build` and `build --dry-run`) has two names.
VERSIONS: dict[str, int] = {
    "error": 1,  # the failure document cli/main.py prints: {"error": {...}}
    "plan": 2,  # 2: `bases` (plan --bases)
    "patches-list": 1,
    "patches-status": 1,
    "patches-check": 2,  # 2: `ok` is false too when the pins disagree (`requirements`, `pin_problems`)
    "patches-check-onto": 1,
    "patches-apply": 1,
    "patches-rebase": 1,  # a rebase that finished
    "patches-rebase-status": 1,  # `patches rebase` alone
    "patches-rebase-abort": 1,
    "patches-edit": 1,
    "patches-edit-discard": 1,
    "patches-refresh": 1,
    "patches-bump": 1,
    "patches-import": 2,  # 2: the command is back (issue 36): after, left_out, series, variants; no steps
    "build": 2,
    "build-plan": 2,  # build --dry-run
    "smoke": 1,
    "skeleton": 1,
    "skeleton-runtime": 2,
    "lock": 1,
    "lock-check": 1,
    "bake": 1,
    "bake-check": 1,
    "publish": 1,
    "publish-plan": 1,  # publish --dry-run
    "recipe": 2,  # 2: no `compose` (the compose file is gone)
    "history": 2,  # 2: the command is back (issue 36), from the engine: no built_at (history.jsonl is gone)
    "rollback": 2,  # 2: --to required; pinned, registry_moves, recipes
}

_ID = re.compile(r"^imgbuild\.([a-z][a-z0-9-]*)/([1-9][0-9]*)$")


def schema_id(name: str) -> str:
    """`imgbuild.<name>/<N>` of a document in the table (KeyError for a name not in it)."""
    return f"{PREFIX}{name}/{VERSIONS[name]}"


def document(name: str, body: Mapping[str, object]) -> dict[str, object]:
    """The document as printed: `schema` first, then the body's keys."""
    return {"schema": schema_id(name), **body}


def parse_id(value: object) -> tuple[str, int] | None:
    """(name, N) of a schema id, or None when `value` is not one."""
    found = _ID.match(value) if isinstance(value, str) else None
    return (found.group(1), int(found.group(2))) if found else None


def mismatch(doc: Mapping[str, object], name: str) -> str | None:
    """A reader's check: why `doc` is not document `name` at this table's version (None when it is).
    The name and N must both match: a different N is a different shape."""
    want = schema_id(name)
    seen = doc.get("schema")
    parsed = parse_id(seen)
    if parsed is None:
        return f"carries no schema id {want!r} (an imgbuild from before the versioned --json output?)"
    if parsed != (name, VERSIONS[name]):
        return f"is {seen!r}, and this reader reads {want!r}"
    return None
