"""`imgbuild publish`: push variants as multi-arch images, registry to registry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imgbuild.cli.options import JsonOpt
from imgbuild.errors import UsageError


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
    from imgbuild.images import publish as pub
    from imgbuild.images import signing
    from imgbuild.project import load_project
    from imgbuild.report.publish import print_publish
    from imgbuild.report.tables import print_json

    if (sbom or sign) and key is None:
        raise UsageError("--sbom and --sign need --key (a cosign private key)", hint="cosign generate-key-pair")
    if key is not None:
        signing.key_file(key, "--key")
    project = load_project()
    selection = project.select(variants, ",".join(platform) if platform else None, default="declared")
    if dry_run:
        result = pub.dry_run(project, selection, registry, repository=repository)
    else:
        result = pub.publish(project, selection, registry, repository=repository, key=key, sbom=sbom, sign=sign)
    if as_json:
        print_json(result.to_json())
    else:
        print_publish(result)
