"""`imgbuild publish`: push variants as multi-arch images, registry to registry."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from imgbuild.cli.options import JsonOpt
from imgbuild.errors import ConfigError, UsageError
from imgbuild.images import publish as pub
from imgbuild.images import signing
from imgbuild.project import load_project
from imgbuild.registry.lock import load_lock
from imgbuild.report.tables import console, print_json


def publish(
    variants: Annotated[list[str], typer.Argument(help="Variants to publish (names of images/*.yaml).")],
    registry: Annotated[
        str, typer.Option("--registry", "-r", help="Registry (and optional path prefix), e.g. ghcr.io/org.")
    ],
    repository: Annotated[
        str | None, typer.Option("--repository", help="Repository name instead of image.repository.")
    ] = None,
    platform: Annotated[
        list[str] | None, typer.Option("--platform", help="Publish only these platforms (default: image.platforms).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Compute digests and print the plan; write nothing.")
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
    """Publish each variant's platform images and a multi-arch index, without pulling the base.

    The base comes by digest from images.lock and stays in its registry:
    its blobs are mounted across repositories (or copied when the base lives
    in another registry), and only the new layers, configs and manifests are
    uploaded. The index is tagged `<version>-<inputs>` first, then the
    variant's moving tags. Equal inputs give equal digests, so publishing
    again uploads nothing. Credentials come from the docker config.

    Examples:

      imgbuild publish latest engram-mem --registry ghcr.io/acme

      imgbuild publish engram-mem -r 127.0.0.1:5000 --platform linux/arm64 --json

      imgbuild publish latest -r 127.0.0.1:5000 --sbom --sign --key cosign.key
    """
    if (sbom or sign) and key is None:
        raise UsageError("--sbom and --sign need --key (a cosign private key)", hint="cosign generate-key-pair")
    if key is not None:
        signing.key_file(key, "--key")
    project = load_project()
    t0 = time.perf_counter()
    if dry_run:
        lock = load_lock(project.root)
        if lock is None:
            raise ConfigError("images.lock is missing", hint="run `imgbuild lock`")
        regs = pub.Registries()
        try:
            plan = pub.plan_publish(project, lock, variants, registry, regs, repository=repository, platforms=platform)
        finally:
            regs.close()
        if as_json:
            print_json({"dry_run": True, "variants": [vp.to_json() for vp in plan]})
        else:
            console.print(_table(plan, None))
            _refs(plan)
        return
    plan, outcomes, stats = pub.publish(project, variants, registry, repository=repository, platforms=platform)
    attached = pub.attach(plan, key, sbom=sbom, sign=sign) if key is not None and (sbom or sign) else []
    seconds = time.perf_counter() - t0
    if as_json:
        print_json(
            {
                "variants": [{**vp.to_json(), **o.to_json()} for vp, o in zip(plan, outcomes, strict=True)],
                "stats": stats.to_json(),
                "attached": attached,
                "seconds": round(seconds, 3),
            }
        )
        return
    console.print(_table(plan, outcomes))
    _refs(plan)
    s = stats
    console.print(
        f"uploaded {s.bytes_up} bytes ({len(s.blobs_uploaded)} blobs, {len(s.manifests_put)} manifests); "
        f"mounted {len(s.blobs_mounted)} blobs, {len(s.blobs_present)} already present; {seconds:.2f}s"
    )


def _table(plan: list[pub.VariantPublish], outcomes: list[pub.Outcome] | None) -> Table:
    table = Table(title="publish")
    for col in ("variant", "platform", "manifest", "new layers", "result"):
        table.add_column(col)
    for i, vp in enumerate(plan):
        o = outcomes[i] if outcomes else None
        result = "dry run" if o is None else o.state + (f" (moved {', '.join(o.moved)})" if o.moved else "")
        for j, pi in enumerate(vp.images):
            layers = "\n".join(f"{lay.blob.digest[7:19]} {lay.blob.size} B" for lay in pi.layers) or "-"
            first = j == 0
            table.add_row(vp.variant if first else "", pi.build.platform, pi.manifest.digest[7:19], layers,
                          result if first else "")  # fmt: skip
    return table


def _refs(plan: list[pub.VariantPublish]) -> None:
    for vp in plan:
        console.print(f"{vp.variant}: index {vp.index.digest}", soft_wrap=True, highlight=False)
        for ref in vp.refs:
            console.print(f"  {ref}", soft_wrap=True, highlight=False)
