"""`imgbuild publish`: build the variants, push them with docker's own tools, and render what it did."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.build import RepoOpt
from imgbuild.cli.options import JsonOpt
from imgbuild.errors import UsageError

if TYPE_CHECKING:
    from imgbuild.publish.push import PublishResult


def publish(
    variants: Annotated[list[str], typer.Argument(help="Variants to publish (names of images/*.yaml).")],
    registry: Annotated[
        str, typer.Option("--registry", "-r", help="Registry (and optional path prefix), e.g. ghcr.io/org.")
    ],
    repository: RepoOpt = None,
    platform: Annotated[
        list[str] | None,
        typer.Option(
            "--platform",
            help="Publish only these platforms; a moving tag keeps the registry's other platforms "
            "(default: image.platforms).",
        ),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            help="Base image for every variant, as for `imgbuild build` ('skeleton': the offline stand-in). "
            "Default: $IMGBUILD_BASE, else image.base.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print where each image would go; build and push nothing.")
    ] = False,
    sbom: Annotated[
        bool,
        typer.Option("--sbom", help="Attest an SPDX SBOM on each platform image (cosign; needs --key)."),
    ] = False,
    sign: Annotated[bool, typer.Option("--sign", help="Sign each index with cosign (needs --key).")] = False,
    key: Annotated[
        Path | None,
        typer.Option("--key", help="cosign private key (cosign generate-key-pair; its password in COSIGN_PASSWORD)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Build each variant's images locally and push them as they are, one digest everywhere.

    The registry is asked first (it answers, it takes docker's credentials): a refusal
    builds nothing. Built and smoke-tested as `imgbuild build` does; every image is pushed,
    then the moving tags, last. A moving tag keeps the platforms this publish does not make
    (a new index beside them, by digest); --dry-run shows each one before and after. A
    failure puts the local moving tags back. Publishing again pushes nothing. Credentials
    are docker's own (`docker login`).

    Examples:

      imgbuild publish latest engram-mem --registry ghcr.io/acme

      imgbuild publish engram-mem -r 127.0.0.1:5000 --platform linux/arm64 --json

      imgbuild publish latest -r 127.0.0.1:5000 --sbom --sign --key cosign.key
    """
    from imgbuild.cli.options import load_project
    from imgbuild.publish import push as pub
    from imgbuild.publish import signing
    from imgbuild.report.documents import images as docs
    from imgbuild.report.tables import print_json

    if (sbom or sign) and key is None:
        raise UsageError("--sbom and --sign need --key (a cosign private key)", hint="cosign generate-key-pair")
    if key is not None:
        signing.key_file(key, "--key")
    project = load_project()
    selection = project.select(variants, ",".join(platform) if platform else None, default="declared")
    base = base or os.environ.get("IMGBUILD_BASE") or None
    result = pub.publish(
        project, selection, registry, repository=repository, base=base, key=key, sbom=sbom, sign=sign, dry_run=dry_run
    )
    if as_json:
        print_json(docs.PUBLISH_PLAN.of(result.planned()) if dry_run else docs.PUBLISH.of(result.published()))
    else:
        print_publish(result)


def print_publish(result: PublishResult) -> None:
    """Per variant and platform, what was pushed where; then each variant's digest and tags."""
    from rich.table import Table

    from imgbuild.report.tables import console

    table = Table(title="publish" + (" (dry run)" if result.outcomes is None else ""))
    for col in ("variant", "platform", "manifest", "pushed as", "result"):
        table.add_column(col)
    for i, vp in enumerate(result.plan):
        o = result.outcomes[i] if result.outcomes else None
        state = "dry run" if o is None else o.state + (f" (moved {', '.join(o.moved)})" if o.moved else "")
        for j, pi in enumerate(vp.images):
            manifest = pi.digest[7:19] if pi.digest.startswith("sha256:") else pi.digest
            table.add_row("" if j else vp.variant, pi.platform, manifest, pi.target, "" if j else state)
    console.print(table)
    for i, vp in enumerate(result.plan):
        digest = result.outcomes[i].digest if result.outcomes else "(not built yet)"
        console.print(f"{vp.variant}: {digest}", soft_wrap=True, highlight=False)
        for ref in (vp.top.target, *vp.moving_refs):
            console.print(f"  {ref}", soft_wrap=True, highlight=False)
        for m in vp.indexes():
            kept = f" (kept: {', '.join(m.kept)})" if m.kept else ""
            line = f"  {m.ref}: before {_platforms(m.before)}; after {_platforms(m.after)}{kept}"
            console.print(line, soft_wrap=True, highlight=False, markup=False)
    if result.outcomes is not None:
        console.print(f"{result.seconds:.2f}s")


def _platforms(found: dict[str, str] | None) -> str:
    """`linux/amd64 0123456789ab, ...` (a digest shortened), or `nothing`."""
    if found is None:
        return "nothing"
    return ", ".join(f"{p} {d[7:19] if d.startswith('sha256:') else d}" for p, d in found.items())
