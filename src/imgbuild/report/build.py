"""Rendering of `build`: the dry run's plan (layers, Dockerfiles, contexts) and what a build did."""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgbuild.builder.result import BuildResult, sharing
from imgbuild.report.tables import console

if TYPE_CHECKING:
    from imgbuild.builder.runner import DryRun


def print_dry_run(dry: DryRun) -> None:
    from imgbuild.plan import dockerfile, layers
    from imgbuild.report.tables import plan_matrix

    plan = dry.plan
    console.print(plan_matrix([ib.plan for ib in plan.images]))
    for title, lp in plan.layer_plans:
        console.print(f"[bold]layers ({title})[/]")
        for line in layers.describe(lp):
            console.print(f"  {line}", markup=False)
    if not dry.asked:
        console.print(
            "[yellow]the Docker daemon did not answer: base image ids are 'unresolved', so digests are provisional[/]"
        )
    for ib in plan.images:
        console.rule(f"image {ib.variant} ({ib.platform}): {ib.immutable_ref} -> {', '.join(ib.moving_refs)}")
        console.print(ib.dockerfile, markup=False, highlight=False, soft_wrap=True)
        console.print("context:", markup=False)
        for entry in dockerfile.listing(ib.context):
            console.print(f"  {entry}", markup=False, highlight=False)
    for join in plan.joins:
        refs = f"{join.immutable_ref} -> {', '.join(join.moving_refs)}"
        console.rule(f"image {join.variant} ({', '.join(str(p.platform) for p in join.parts)}): {refs}")
        console.print(join.dockerfile, markup=False, highlight=False, soft_wrap=True)


def print_result(result: BuildResult) -> None:
    shared = sharing(result.images)
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
