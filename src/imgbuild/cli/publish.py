"""`imgbuild publish`: build the variants, then push them as multi-platform images with docker's own tools."""

from __future__ import annotations

import os
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
    """Build each variant's platform images locally, push them, and join them in one index per variant.

    The images are built and smoke-tested as `imgbuild build` does. Each
    platform image is pushed with `docker push` under its own immutable tag
    (on the containerd image store the registry keeps its local digest, and
    skips the blobs it has), `docker buildx imagetools create` joins them
    under `<version>-<inputs>`, and only then are the variant's moving tags
    pointed at that index. Publishing again pushes nothing. Credentials are
    docker's own (`docker login`).

    Examples:

      imgbuild publish latest engram-mem --registry ghcr.io/acme

      imgbuild publish engram-mem -r 127.0.0.1:5000 --platform linux/arm64 --json

      imgbuild publish latest -r 127.0.0.1:5000 --sbom --sign --key cosign.key
    """
    from imgbuild.project import load_project
    from imgbuild.publish import push as pub
    from imgbuild.publish import signing
    from imgbuild.report.publish import print_publish
    from imgbuild.report.tables import print_json

    if (sbom or sign) and key is None:
        raise UsageError("--sbom and --sign need --key (a cosign private key)", hint="cosign generate-key-pair")
    if key is not None:
        signing.key_file(key, "--key")
    project = load_project()
    selection = project.select(variants, ",".join(platform) if platform else None, default="declared")
    base = base or os.environ.get("IMGBUILD_BASE") or None
    if dry_run:
        result = pub.dry_run(project, selection, registry, repository=repository, base=base)
    else:
        result = pub.publish(
            project, selection, registry, repository=repository, base=base, key=key, sbom=sbom, sign=sign
        )
    if as_json:
        print_json("publish-plan" if dry_run else "publish", result.to_json())
    else:
        print_publish(result)
