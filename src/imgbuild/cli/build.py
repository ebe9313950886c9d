"""`imgbuild build`: build, smoke-test and tag variant images on the local Docker engine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from imgbuild.cli.options import JsonOpt
from imgbuild.config.models import check_platform
from imgbuild.images import build as engine
from imgbuild.images import dockerfile, layers
from imgbuild.images.build import BuildOptions
from imgbuild.images.docker import Engine
from imgbuild.images.multiplan import MultiPlan
from imgbuild.images.plan import BuildPlan
from imgbuild.images.smoke import SmokeReport
from imgbuild.project import Project, load_project
from imgbuild.report.images import check_junit_path, checks_table, file_matrix, write_junit
from imgbuild.report.tables import console, plan_matrix, print_json

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
    str | None, typer.Option("--repository", help="Repository for every tag, overriding image.repository.")
]
PlatformOpt = Annotated[
    str | None,
    typer.Option(
        "--platform",
        help="Platform to build, e.g. linux/amd64 (default: the variant's first platform); 'all' (every "
        "declared platform) or a comma list: on Docker 26 with the containerd image store one multi-platform "
        "image per tag, built in one call; on older engines one platform at a time, with -<arch> tag suffixes.",
    ),
]
JunitOpt = Annotated[Path | None, typer.Option("--junit", help="Write the smoke results as JUnit XML to FILE.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show the buildx and mmdebstrap output.")]


BuilderOpt = Annotated[
    str | None,
    typer.Option(
        "--builder",
        help="buildx builder to build on (e.g. a remote or multi-node one with native arm64 nodes; default: "
        "$BUILDX_BUILDER, else buildx's current builder). It resolves the bases itself.",
    ),
]


def options(
    base: str | None, repository: str | None, platform: str | None, builder: str | None = None, **kw: bool
) -> BuildOptions:
    check_platform(platform, allow_all=True)
    return BuildOptions(
        base=base or os.environ.get("IMGBUILD_BASE") or None,
        repository=repository,
        platform=platform,
        builder=builder or os.environ.get("BUILDX_BUILDER") or None,
        **kw,
    )


def build(
    variants: Annotated[list[str] | None, typer.Argument(help="Variants to build (default: all in images/).")] = None,
    base: BaseOpt = None,
    repository: RepoOpt = None,
    platform: PlatformOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild layers and images even when their inputs are unchanged.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the plan, the layers, the Dockerfiles and the contexts; build nothing."),
    ] = False,
    no_smoke: Annotated[
        bool,
        typer.Option("--no-smoke", help="Build and tag the immutable tag only; moving tags need a smoke-tested image."),
    ] = False,
    junit: JunitOpt = None,
    verbose: VerboseOpt = False,
    builder: BuilderOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build variant images with BuildKit and tag them after they pass their smoke test.

    Each variant image is its base plus shared layers of patched files (no layer ever
    reverts a file), with ENTRYPOINT and CMD cleared and provenance labels. Tags: an
    immutable <version>-<inputs digest> first, then, after the smoke test, the moving
    tags (e.g. latest). An image whose inputs are unchanged is reused without a build.

    Examples:

      imgbuild build --dry-run

      imgbuild build latest engram-mem --base skeleton

      imgbuild build latest engram-mem --base runtime --platform linux/amd64

      imgbuild build --platform all --builder spark-farm
    """
    if junit is not None:
        check_junit_path(junit)
    project = load_project()
    project.refuse_bad_headers()
    names = variants or sorted(project.variants, key=lambda n: (len(project.variants[n].chain), n))
    opts = options(base, repository, platform, builder, force=force, smoke=not no_smoke, verbose=verbose)
    if dry_run:
        plan, asked, multi = engine.dry_run(project, names, opts)
        _print_dry_run(project, plan, asked, as_json, multi)
        return
    reports: list[SmokeReport] = []

    def on_smoke(report: SmokeReport) -> None:
        reports.append(report)
        if not as_json:
            console.print(checks_table(report))

    try:
        result = engine.build(Engine.connect(), project, names, opts, on_smoke=on_smoke)
    finally:
        if junit is not None:
            write_junit(junit, reports)
        if reports and not as_json:
            console.print(file_matrix([(r.title, r.files) for r in reports]))
    if as_json:
        print_json({"layers": [lr.to_json() for lr in result.layers], "images": [i.to_json() for i in result.images]})
        return
    for lr in result.layers:
        console.print(
            f"layer {lr.tag}: {'built' if lr.built else 'reused'} ({lr.image_id[7:19]}; {', '.join(lr.files)})"
        )
    shared = engine.sharing(result.images)
    for ir in result.images:
        status = "built" if ir.built else "reused, unchanged inputs (no docker build)"
        moving = ir.moving if ir.moved or not ir.built else ()
        tags = ", ".join([ir.immutable, *(() if ir.index_ref else moving)])
        console.print(f"[bold]{ir.variant}[/] ({ir.platform}): {status}; {ir.image_id[7:19]}; tags {tags}")
        if ir.index_ref:  # one platform of a multi-platform image
            console.print(f"  in {', '.join([ir.index_ref, *moving])} ({ir.index[7:19]}, every platform)")
        console.print(f"  layers: {shared[f'{ir.variant} {ir.platform}']}")
        if ir.note:
            console.print(f"  note: {ir.note}")


def _multi_json(multi: MultiPlan) -> dict[str, object]:
    return {
        "layers": [
            {"tag": ml.tag, "digest": ml.digest, "platforms": list(ml.platforms), "files": list(ml.files),
             "dockerfile": ml.dockerfile}
            for ml in multi.layers
        ],
        "images": [
            {"variant": mi.variant, "platforms": list(mi.platforms), "immutable": mi.immutable_ref,
             "moving": list(mi.moving_refs), "platform_refs": mi.platform_refs, "inputs_digest": mi.inputs_digest,
             "dockerfile": mi.dockerfile}
            for mi in multi.images
        ],
    }  # fmt: skip


def _print_multi(multi: MultiPlan) -> None:
    console.rule("this engine builds each of these in one call, for every platform")
    for ml in multi.layers:
        console.rule(f"layer {ml.tag} ({', '.join(ml.platforms)})")
        console.print(ml.dockerfile, markup=False, highlight=False, soft_wrap=True)
    for mi in multi.images:
        refs = f"{mi.immutable_ref} -> {', '.join(mi.moving_refs)}"
        console.rule(f"image {mi.variant} ({', '.join(mi.platforms)}): {refs}")
        console.print(mi.dockerfile, markup=False, highlight=False, soft_wrap=True)


def _print_dry_run(
    project: Project, plan: BuildPlan, asked: bool, as_json: bool, multi: MultiPlan | None = None
) -> None:
    if as_json:
        print_json(
            {
                **({"multi_platform": _multi_json(multi)} if multi else {}),
                "layers": [
                    {
                        "tag": lb.tag,
                        "digest": lb.digest,
                        "platform": lb.platform,
                        "files": list(lb.files),
                        "dockerfile": lb.dockerfile,
                        "context": [str(e) for e in dockerfile.listing(lb.context)],
                    }
                    for lb in plan.layers
                ],
                "images": [
                    {
                        "variant": ib.variant,
                        "platform": ib.platform,
                        "base": ib.base.ref,
                        "immutable": ib.immutable_ref,
                        "moving": list(ib.moving_refs),
                        "inputs_digest": ib.inputs_digest,
                        "layers": list(ib.layers),
                        "dockerfile": ib.dockerfile,
                        "labels": dict(ib.labels),
                    }
                    for ib in plan.images
                ],
                "layer_plans": {title: layers.describe(lp) for title, lp in plan.layer_plans},
            }
        )
        return
    console.print(plan_matrix([ib.plan for ib in plan.images]))
    for title, lp in plan.layer_plans:
        console.print(f"[bold]layers ({title})[/]")
        for line in layers.describe(lp):
            console.print(f"  {line}", markup=False)
    if not asked:
        console.print(
            "[yellow]the Docker daemon did not answer: base image ids are 'unresolved', so digests are provisional[/]"
        )
    for lb in plan.layers:
        console.rule(f"layer {lb.tag} ({lb.platform})")
        console.print(lb.dockerfile, markup=False, highlight=False, soft_wrap=True)
        console.print("context:", markup=False)
        for entry in dockerfile.listing(lb.context):
            console.print(f"  {entry}", markup=False, highlight=False)
    for ib in plan.images:
        console.rule(f"image {ib.variant} ({ib.platform}): {ib.immutable_ref} -> {', '.join(ib.moving_refs)}")
        console.print(ib.dockerfile, markup=False, highlight=False, soft_wrap=True)
        console.print(f"context: {', '.join(str(e) for e in dockerfile.listing(ib.context))}", markup=False)
    if multi is not None:
        _print_multi(multi)
