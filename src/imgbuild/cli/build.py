"""`imgbuild build`: build, smoke-test and tag variant images on the local Docker engine."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.options import JsonOpt

if TYPE_CHECKING:
    from imgbuild.builder.options import BuildOptions
    from imgbuild.smoke.report import SmokeReport


BaseOpt = Annotated[
    str | None,
    typer.Option(
        "--base",
        help="Base image for every variant, overriding image.base. 'skeleton' builds on imgbuild's offline "
        "stand-in (see `imgbuild skeleton`); 'runtime' on the stand-in that can import vllm (the locked wheels, "
        "`imgbuild skeleton --runtime`). Default: $IMGBUILD_BASE, else image.base.",
    ),
]
RepoOpt = Annotated[
    str | None,
    typer.Option(
        "--repository",
        help="The images' repository instead of image.repository: locally, and REG/REPO in a registry "
        "(one meaning in build, publish, recipe, history and rollback).",
    ),
]
PlatformOpt = Annotated[
    str | None,
    typer.Option(
        "--platform",
        help="Platform to build, e.g. linux/amd64 (default: the variant's first platform); 'all' (every "
        "declared platform) or a comma list: one image per platform under its own immutable tag, joined into one "
        "multi-platform image that takes the moving tags.",
    ),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show the buildx and mmdebstrap output.")]


BuilderOpt = Annotated[
    str | None,
    typer.Option(
        "--builder",
        help="buildx builder to build on (e.g. a remote or multi-node one with native arm64 nodes; default: "
        "$BUILDX_BUILDER, else buildx's current builder). It resolves the bases itself.",
    ),
]


def options(base: str | None, repository: str | None, builder: str | None = None, **kw: bool) -> BuildOptions:
    """The build's options (--platform is part of the selection: `Project.select`)."""
    from imgbuild.builder.options import BuildOptions

    return BuildOptions(
        base=base or os.environ.get("IMGBUILD_BASE") or None,
        repository=repository,
        builder=builder or os.environ.get("BUILDX_BUILDER") or None,
        **kw,
    )


def build(
    variants: Annotated[list[str] | None, typer.Argument(help="Variants to build (default: all in images/).")] = None,
    base: BaseOpt = None,
    repository: RepoOpt = None,
    platform: PlatformOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild every image, without BuildKit's cache, even when unchanged.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the plan, the layers, the Dockerfiles and the contexts; build nothing."),
    ] = False,
    no_smoke: Annotated[
        bool,
        typer.Option("--no-smoke", help="Build and tag the immutable tag only; moving tags need a smoke-tested image."),
    ] = False,
    verbose: VerboseOpt = False,
    builder: BuilderOpt = None,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="Make no network request: build from the cache (the pinned release, wheels, skeleton rootfs) and "
            "the local image store; anything missing is an error (exit 11) naming it and how to fetch it online. "
            "Also $IMGBUILD_OFFLINE=1; sparkrun's offline launches set it.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build variant images with BuildKit and tag them after they pass their smoke test.

    Each variant image is its base plus shared layers of patched files (no layer ever
    reverts a file), with ENTRYPOINT and CMD cleared and provenance labels. Tags: an
    immutable <version>-<inputs digest> first, then, after the smoke test, the moving
    tags (e.g. latest). An image whose inputs are unchanged is reused without a build;
    the same build asked again with nothing changed is answered from its receipt in the
    cache, in engine reads only ("nothing changed since this build last ran").

    Examples:

      imgbuild build --dry-run

      imgbuild build latest engram-mem --base skeleton

      imgbuild build latest engram-mem --base runtime --platform linux/amd64

      imgbuild build --platform all --builder spark-farm

      imgbuild build latest --offline --json
    """
    from imgbuild import offline as network
    from imgbuild.report.tables import console, print_json

    if as_json:  # the documents' types: under --json only
        from imgbuild.report.documents import images as docs
    if offline:
        network.enable()
    opts = options(base, repository, builder, force=force, smoke=not no_smoke, verbose=verbose)
    if dry_run:
        from imgbuild.builder import runner
        from imgbuild.cli.options import load_project
        from imgbuild.report.build import print_dry_run

        project = load_project()
        project.refuse_bad_headers()
        dry = runner.dry_run(project, project.select(variants, platform), opts)
        if as_json:
            print_json(docs.BUILD_PLAN.of(dry.plan.planned()))
        else:
            print_dry_run(dry)
        return
    from imgbuild.builder import receipt
    from imgbuild.cli.options import find_root
    from imgbuild.engine import Engine
    from imgbuild.progress import to_stderr

    reports: list[SmokeReport] = []

    def on_smoke(report: SmokeReport) -> None:
        from imgbuild.report.images import checks_table

        reports.append(report)
        if not as_json:
            console.print(checks_table(report))

    try:
        result = receipt.build(Engine.connect, find_root(), variants, platform, opts, to_stderr, on_smoke)
    finally:
        if reports and not as_json:
            from imgbuild.report.images import file_matrix

            console.print(file_matrix([(r.title, r.files) for r in reports]))
    if as_json:
        print_json(docs.BUILD.of(result))
        return
    from imgbuild.report.build import print_result

    print_result(result)
