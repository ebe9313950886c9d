"""Rendering of `publish`: the per-variant table, the refs written, and the registry traffic."""

from __future__ import annotations

from rich.table import Table

from imgbuild.images.publish import PublishResult
from imgbuild.report.tables import console


def table(result: PublishResult) -> Table:
    out = Table(title="publish")
    for col in ("variant", "platform", "manifest", "new layers", "result"):
        out.add_column(col)
    for i, vp in enumerate(result.plan):
        o = result.outcomes[i] if result.outcomes else None
        state = "dry run" if o is None else o.state + (f" (moved {', '.join(o.moved)})" if o.moved else "")
        for j, pi in enumerate(vp.images):
            layers = "\n".join(f"{lay.blob.digest[7:19]} {lay.blob.size} B" for lay in pi.layers) or "-"
            first = j == 0
            out.add_row(vp.variant if first else "", pi.build.platform, pi.manifest.digest[7:19], layers,
                        state if first else "")  # fmt: skip
    return out


def print_publish(result: PublishResult) -> None:
    console.print(table(result))
    for vp in result.plan:
        console.print(f"{vp.variant}: index {vp.index.digest}", soft_wrap=True, highlight=False)
        for ref in vp.refs:
            console.print(f"  {ref}", soft_wrap=True, highlight=False)
    s = result.stats
    if s is not None:
        console.print(
            f"uploaded {s.bytes_up} bytes ({len(s.blobs_uploaded)} blobs, {len(s.manifests_put)} manifests); "
            f"mounted {len(s.blobs_mounted)} blobs, {len(s.blobs_present)} already present; {result.seconds:.2f}s"
        )
