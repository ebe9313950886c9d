"""`history` and `rollback` as lines of text (pure; the commands print them)."""

from __future__ import annotations

from imgbuild.deploy.history import Entry, History, Rollback
from imgbuild.deploy.recipes import Recipe


def _upstreams(entry: Entry) -> str:
    return ", ".join(
        f"{u.name + ' ' if u.name else ''}{u.tag or entry.version} ({u.commit[:12]})" for u in entry.upstreams
    )


def _patches(entry: Entry) -> str:
    applied = [n for n, s in entry.patches.items() if s == "applied"]
    reverted = [n for n, s in entry.patches.items() if s != "applied"]
    return f"{len(applied)} applied" + (f", {len(reverted)} reverted ({', '.join(reverted)})" if reverted else "")


def entry_lines(entry: Entry) -> list[str]:
    now = f"  <- {', '.join(entry.moving)}" if entry.moving else ""
    base = entry.base.name or "?"
    lines = [f"{entry.ref}{now}", f"  image     {entry.image_id}  ({entry.kind})"]
    lines += [f"  {platform:<9} {digest}" for platform, digest in entry.platforms.items()]
    lines += [
        f"  created   {entry.created} (inputs' date)   last tagged {entry.last_tagged or 'unknown'}",
        f"  upstream  {_upstreams(entry)}",
        f"  patches   series {entry.series.removeprefix('sha256:')[:12]}: {_patches(entry)}",
        f"  base      {base}" + (f"@{entry.base.digest}" if entry.base.digest else ""),
        f"  inputs    {entry.inputs}",
        f"  smoke     {entry.smoke_state}",
    ]
    reg = entry.registry
    if reg is not None:
        where = f"{reg.ref} ({'same digest' if reg.digest == entry.image_id else reg.digest or 'absent'})"
        lines.append(f"  registry  {where}" + (f"  <- {', '.join(reg.moving)}" if reg.moving else ""))
    return lines


def history_lines(history: History) -> list[str]:
    n = len(history.entries)
    lines = [f"{history.variant} in {history.repository}: {n} build{'s' if n != 1 else ''} in the local store"]
    for ref, image_id in history.moving.items():
        named = history.find(image_id) if image_id else None
        lines.append(f"  {ref} -> {named.ref if named else image_id or 'nothing'}")
    there = history.registry
    for ref, digest in (there.moving if there else {}).items():
        named = next((e for e in history.entries if e.registry and e.registry.digest == digest), None)
        line = f"  {ref} -> {named.ref if named and digest else digest or 'nothing'}"
        if named is None and there and ref in there.platforms:  # an index no build here is: say what it holds
            line += ", an index of " + ", ".join(f"{p} {r}" for p, r in there.platforms[ref].items())
        lines.append(line)
    for entry in history.entries:
        lines += ["", *entry_lines(entry)]
    return lines


def rollback_lines(result: Rollback, recipes: list[Recipe], rewritten: bool) -> list[str]:
    lines = []
    if not result.smoke:
        lines.append(f"{result.target.ref}: not smoke-tested (--no-smoke)")
    for report in result.smoke:
        lines.append(f"{report.image}: smoke test passed ({len(report.checks)} checks, {report.platform})")
    for m in (*result.moves, *result.registry_moves):
        if m.before == m.after:
            lines.append(f"{m.ref}: already {result.target.ref}, unchanged")
        else:
            lines.append(f"{m.ref}: moved from {m.before or 'nothing'} to {result.target.ref} ({m.after})")
    if rewritten:
        lines += [f"recipe {r.path}: now pins {result.pinned}" for r in recipes]
    elif recipes:
        for r in recipes:
            lines += ["", f"# sparkrun recipe, profile {r.profile.name} (not written; --recipe FILE rewrites one)"]
            lines += r.text().rstrip("\n").splitlines()
    else:
        lines.append(f"container: {result.pinned}   (the pin for a sparkrun recipe; no launch profile names "
                     f"{result.variant})")  # fmt: skip
    return lines
