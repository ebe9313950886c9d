"""Rendering of `history` and `rollback` (pure: lines of text; the command prints them)."""

from __future__ import annotations

from imgbuild.builder.history import Entry, History, Rollback


def _patches(entry: Entry) -> str:
    applied = [n for n, s in entry.patches.items() if s == "applied"]
    reverted = [n for n, s in entry.patches.items() if s != "applied"]
    text = f"{len(applied)} applied"
    if reverted:
        text += f", {len(reverted)} reverted ({', '.join(reverted)})"
    return text


def _files(entry: Entry) -> str:
    counts: dict[str, int] = {}
    for state in entry.files.values():
        counts[state] = counts.get(state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"


def entry_lines(entry: Entry) -> list[str]:
    now = f"  <- {', '.join(entry.moving)}" if entry.moving else ""
    base = entry.base_name + (f"@{entry.base_digest}" if entry.base_digest else "")
    when = entry.built_at or "unknown"
    if entry.built_at_source != "record":
        when += " (last tagged; no build record)"
    return [
        f"{entry.ref}{now}",
        f"  image     {entry.image_id[:19]}  {entry.kind}, {', '.join(entry.platforms)}",
        f"  built     {when}",
        f"  upstream  {entry.upstream_tag or entry.version} ({entry.upstream_commit[:12]})",
        f"  patches   series {entry.series[:12]}: {_patches(entry)}",
        f"  files     {_files(entry)}",
        f"  base      {base}",
        f"  created   {entry.created}  inputs {entry.inputs[:12]}",
    ]


def history_lines(history: History) -> list[str]:
    head = f"{history.variant} in {history.repository}: {len(history.entries)} immutable tag"
    head += "" if len(history.entries) == 1 else "s"
    lines = [head + " (newest first)"]
    for ref in history.moving:
        image_id = history.named.get(ref)
        named = next((e.ref for e in history.entries if e.image_id == image_id), None)
        lines.append(f"  {ref} -> {named or (image_id[:19] if image_id else 'nothing')}")
    for entry in history.entries:
        lines.append("")
        lines.extend(entry_lines(entry))
    return lines


def rollback_lines(result: Rollback) -> list[str]:
    lines = []
    if result.smoke is None:
        lines.append(f"{result.target.ref}: not smoke-tested (--no-smoke)")
    else:
        lines.append(f"{result.target.ref}: smoke test passed ({len(result.smoke.checks)} checks)")
    for m in result.moves:
        if m.before_id == m.after_id:
            lines.append(f"{m.ref}: already {m.after}, unchanged")
        else:
            lines.append(f"{m.ref}: moved from {m.before or 'nothing'} to {m.after}")
    return lines
