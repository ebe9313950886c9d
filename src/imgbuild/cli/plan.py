"""`imgbuild plan`: what each variant carries, patched or original, and with `--bases` what each base holds."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild.cli.options import JsonOpt


def plan(
    variants: Annotated[list[str] | None, typer.Argument(help="Variants to plan (default: all in images/).")] = None,
    bases: Annotated[
        bool,
        typer.Option(
            "--bases",
            help="Also read each variant's image.base from the local image store (nothing pulled or built; one "
            "container per base, kept in the cache) and show its packages against the pins.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show which files each image variant carries patched or original.

    Applies each variant's patches to the pinned release in memory and prints
    the variant x file matrix (like section 3 of the deployment report).
    With --json, prints the full plan: states, patches, sha256 and blob ids.
    With --bases, also what each base carries of the pinned packages (a build
    refuses a base that disagrees: docs/building-images.md, The stock vLLM image).

    Examples:
      imgbuild plan engram-mem
      imgbuild plan --bases --json
    """
    from imgbuild.cli.options import load_project
    from imgbuild.plan.layers import share_layers
    from imgbuild.report.documents import images as docs
    from imgbuild.report.tables import console, plan_matrix, print_json
    from imgbuild.workflows.planning import planned

    project = load_project()
    every = project.plan()  # the layers are planned over every variant, as `build` and the bake file plan them
    plans = project.plan(variants) if variants else every
    layers = share_layers(every).describe(variants or None)
    carries = None
    if bases:  # the engine (and the docker SDK) only for --bases: a plan is pure
        from imgbuild.builder.packages import read_bases

        carries = read_bases(project.pins, plans)
    if as_json:
        print_json(docs.PLAN.of(planned(project, plans, layers, carries)))
        return
    console.print(plan_matrix(plans))
    for p in sorted(plans, key=lambda p: (len(p.variant.chain), p.variant.name)):
        v = p.variant
        chain = " <- ".join(reversed(v.chain))
        console.print(
            f"[bold]{v.name}[/]: {len(v.selected)} patches ({chain})"
            + (f"; leaves out {', '.join(v.reverted)}" if v.reverted else "")
        )
    console.print("[bold]layers[/] (on a shared base; `imgbuild build --dry-run` shows the Dockerfiles):")
    for line in layers:
        console.print(f"  {line}", markup=False)
    for need in project.pin_needs:
        console.print(f"pins: {need.message}", markup=False, highlight=False)
    said = {need.pin for need in project.pin_needs if need.override is not None}  # its message gave the reason
    for pin in project.pins:
        if pin.override and pin.name not in said:
            o = pin.override
            console.print(
                f"override: {pin.name} pin: {o.requirement} -> {o.version} ({o.reason})", markup=False, highlight=False
            )
    for problem in project.pin_problems:
        console.print(f"pins disagree: {problem}", markup=False, highlight=False)
    for b in carries or ():
        head = f"base {b.ref} ({', '.join(b.variants)})"
        if b.unread:
            console.print(f"{head}: not read: {b.unread}", markup=False, highlight=False)
            continue
        console.print(f"{head}, {b.platform}:", markup=False, highlight=False)
        for c in b.packages:
            mark = "ok  " if c.agrees else "DIFF"
            console.print(f"  {mark} {c.say()}", markup=False, highlight=False)
