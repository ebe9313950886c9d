"""Backports of upstream fixes (`Upstream-Status: Backport`): which patches are backports, and their
`Applied-Upstream:` field, which rebase fills once a release contains the fix (pure)."""

from __future__ import annotations

import re

from imgbuild.patches.hunks import decode, encode

APPLIED_RE = re.compile(r"^(Applied-Upstream:)[ \t]*([^\r\n]*)(\r?\n)", re.MULTILINE)


def is_backport(fields: dict[str, str]) -> bool:
    return fields.get("Upstream-Status", "").strip().lower().startswith("backport")


def set_applied_upstream(text: str, release: str) -> str:
    """`text` (a patch file) with `Applied-Upstream: <release>` in its header ('' empties it)."""
    diff = re.search(r"^diff --git ", text, flags=re.MULTILINE)
    cut = diff.start() if diff else len(text)
    head, rest = text[:cut], text[cut:]
    value = f" {release}" if release else ""
    if APPLIED_RE.search(head):
        head = APPLIED_RE.sub(lambda m: f"{m.group(1)}{value}{m.group(3)}", head, count=1)
    else:
        status = re.search(r"^Upstream-Status:[^\n]*\n", head, flags=re.MULTILINE)
        at = status.end() if status else 0
        head = head[:at] + f"Applied-Upstream:{value}\n" + head[at:]
    return head + rest


def applied_upstream_bytes(data: bytes, fields: dict[str, str], release: str) -> bytes:
    """A patch file's bytes with Applied-Upstream set, when it is a backport (else unchanged)."""
    if not is_backport(fields):
        return data
    return encode(set_applied_upstream(decode(data), release))
