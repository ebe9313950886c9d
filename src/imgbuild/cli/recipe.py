"""`imgbuild recipe VARIANT --profile NAME`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imgbuild.cli.build import RepoOpt
from imgbuild.cli.options import JsonOpt


def recipe(
    variant: Annotated[str, typer.Argument(metavar="VARIANT", help="Image variant (a file in images/).")],
    profile: Annotated[str, typer.Option("--profile", "-p", help="Launch profile from deploy/profiles.yaml.")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Directory to write the recipe to (default: deploy/out).")
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image", help="Image to pin instead of the variant's local tag (tag, image id or REF@sha256:...)."
        ),
    ] = None,
    registry: Annotated[
        str | None,
        typer.Option(
            "--registry",
            help="Pin the index digest published in this registry instead (with --builder: the builder "
            "runs the variant published there, by digest).",
        ),
    ] = None,
    builder: Annotated[
        bool,
        typer.Option(
            "--builder", help="Let sparkrun build the variant at launch (`builder: imgbuild`) instead of pinning."
        ),
    ] = False,
    repository: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a sparkrun recipe for VARIANT with a launch profile.

    The image is pinned by an immutable tag or digest, never a moving tag (see docs/launching.md).

    Examples:

      imgbuild recipe latest --profile TP8-1M

      imgbuild recipe engram-mem --profile TP8-300K --out /tmp/launch --json

      imgbuild recipe latest --profile TP8-1M --registry 127.0.0.1:5000

      imgbuild recipe latest --profile TP8-1M --builder

      imgbuild recipe latest --profile TP8-1M --builder --registry 127.0.0.1:5000

    Then: `sparkrun run deploy/out/latest-tp8-1m.yaml --hosts ...`.
    """
    from imgbuild.cli.options import load_project
    from imgbuild.deploy.recipes import write_recipe
    from imgbuild.report.documents import deploy as docs
    from imgbuild.report.tables import console, print_json

    project = load_project()
    target = out if out is not None else project.root / "deploy" / "out"
    written = write_recipe(
        project, variant, profile, out=target, image=image, registry=registry, repository=repository, builder=builder
    )
    if as_json:
        print_json(docs.RECIPE.of(written.written()))
        return
    console.print(f"image:   {written.image.ref} ({written.image.source})")
    console.print(f"recipe:  {written.path}")
