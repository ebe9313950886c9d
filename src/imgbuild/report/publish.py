"""Rendering of `publish`: per variant and platform, what was pushed where, and the tags written."""

from __future__ import annotations

from rich.table import Table

from imgbuild.publish.push import PublishResult
from imgbuild.report.tables import console


def table(result: PublishResult) -> Table:
    out = Table(title="publish" + (" (dry run)" if result.outcomes is None else ""))
    for col in ("variant", "platform", "manifest", "pushed as", "result"):
        out.add_column(col)
    for i, vp in enumerate(result.plan):
        o = result.outcomes[i] if result.outcomes else None
        state = "dry run" if o is None else o.state + (f" (moved {', '.join(o.moved)})" if o.moved else "")
        for j, pi in enumerate(vp.images):
            first = j == 0
            manifest = pi.digest[7:19] if pi.digest.startswith("sha256:") else pi.digest
            out.add_row(vp.variant if first else "", pi.platform, manifest, pi.target, state if first else "")
    return out


def print_publish(result: PublishResult) -> None:
    console.print(table(result))
    for i, vp in enumerate(result.plan):
        digest = result.outcomes[i].digest if result.outcomes else "(not built yet)"
        console.print(f"{vp.variant}: {digest}", soft_wrap=True, highlight=False)
        for ref in (vp.top.target, *vp.moving_refs):
            console.print(f"  {ref}", soft_wrap=True, highlight=False)
    if result.outcomes is not None:
        console.print(f"{result.seconds:.2f}s")
