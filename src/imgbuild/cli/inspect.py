"""`imgbuild inspect IMAGE`: read an image's labels back and check them against its files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imgbuild.cli.options import JsonOpt
from imgbuild.errors import CheckFailed, UsageError


def inspect(
    image: Annotated[str, typer.Argument(help="An image reference or id, e.g. vllm-dsv41:latest.")],
    platform: Annotated[
        str | None,
        typer.Option("--platform", help="For a registry reference: the platform to pull (default: the daemon's)."),
    ] = None,
    pub_key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="cosign public key: also verify the signature of what the reference names and the platform "
            "image's SPDX SBOM (registry references; see `publish --sign --sbom`).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show what an image says it carries, re-hash its files, and name every disagreement.

    Prints the upstream pin, the patch states and the file matrix read from the image.
    Exit status 1 when labels and contents disagree (or the image was not built by imgbuild).
    """
    from rich.markup import escape

    from imgbuild.engine import Engine
    from imgbuild.plan.labels import OCI, PREFIX
    from imgbuild.publish import signing
    from imgbuild.report.images import file_matrix
    from imgbuild.report.tables import console, print_json
    from imgbuild.smoke.inspect import inspect_image, is_registry_ref, localize

    if pub_key is not None and not is_registry_ref(image):
        raise UsageError(f"--key checks what a registry holds; {image!r} is a local name", hint="pass host/repo:tag")
    if pub_key is not None:
        signing.key_file(pub_key, "--key")
    engine = Engine.connect()
    pinned = localize(engine, image, platform)
    report = inspect_image(engine, pinned)
    chain = signing.check_published(image, pinned, pub_key, report.info.labels) if pub_key is not None else None
    if as_json:
        print_json("inspect", {**report.to_json(), **({"supply_chain": chain.to_json()} if chain else {})})
    else:
        info = report.info
        lab = info.labels
        console.print(f"[bold]{image}[/] {info.id[7:19]} {info.platform}; tags: {', '.join(info.tags) or '-'}")
        console.print(f"ENTRYPOINT {list(info.entrypoint or [])}  CMD {list(info.cmd or [])}")
        for key in ("variant", "upstream.url", "upstream.tag", "upstream.commit", "series", "inputs", "site-packages"):
            console.print(f"{key:16} {lab.get(PREFIX + key, '-')}", markup=False)
        for key in ("created", "base.name", "base.digest"):
            console.print(f"{key:16} {lab.get(OCI + key, '-')}", markup=False)
        console.print(f"{'layers':16} {len(info.layers)} ({', '.join(d[7:19] for d in info.layers[-3:])} on top)")
        for line in _upstream_lines(report.upstreams(), report.patches()):
            console.print(line, markup=False)
        if report.files:
            console.print(file_matrix([(image, report.files)], title="labels vs contents"))
        for d in report.disagreements:
            console.print(f"[bold red]disagree[/]: {escape(d)}")
        for n in report.notes:
            console.print(f"[yellow]not checked[/]: {escape(n)}")
        if report.ok:
            console.print(f"[green]labels and contents agree[/] ({len(report.files)} files)")
        if chain is not None:
            for what, v in (("signature", chain.signature), ("sbom", chain.sbom)):
                mark = "[green]verified[/]" if v.ok else "[bold red]missing or not verified[/]"
                console.print(f"{what:16} {mark}: {v.detail}", highlight=False)
            for problem in chain.problems:
                console.print(f"[bold red]disagree[/]: {problem}")
    if not report.ok or (chain is not None and not chain.ok):
        problems = [*report.disagreements, *(chain.problems if chain is not None else ())]
        first = problems[0] if problems else "the signature or the SBOM is not verified"
        raise CheckFailed(f"{image}: {first} ({max(len(problems), 1)} problem(s))", reported=True)


def _upstream_lines(upstreams: list[dict[str, object]], patches: dict[str, str]) -> list[str]:
    """One line per pinned upstream the image names, with the patches applied to it; then each patch's state."""
    lines = []
    for up in upstreams:
        named = up.get("patches")
        applied = ", ".join(str(n) for n in named) if isinstance(named, list) and named else "none"
        name = up.get("name") or "(the pin)"
        lines.append(f"upstream {name} {up.get('tag')} @ {up.get('commit')}: patches {applied}")
    return lines + [f"  patch {name}: {state}" for name, state in patches.items()]
