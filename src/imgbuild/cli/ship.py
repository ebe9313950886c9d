"""`imgbuild ship VARIANT --to NODE...`: forwards to ship.py."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild.cli.options import JsonOpt
from imgbuild.errors import DockerError, UsageError


def ship_cmd(
    variant: Annotated[str, typer.Argument(metavar="VARIANT", help="Image variant (a file in images/).")],
    to: Annotated[
        list[str],
        typer.Option(
            "--to", metavar="NODE", help="ssh://user@host, tcp://host:port, unix:///sock or a docker context."
        ),
    ],
    image: Annotated[
        str | None, typer.Option("--image", help="Ship this local image instead of the variant's tag.")
    ] = None,
    with_base: Annotated[
        bool, typer.Option("--with-base", help="Send the base layers too when a node lacks them.")
    ] = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Nodes shipped at once.")] = 8,
    as_json: JsonOpt = False,
) -> None:
    """Put a variant's image on every node, sending only the layers a node does not have.

    For each node (in parallel), imgbuild asks which of the image's layers it
    holds, streams a `docker save` archive without those layers and without
    tags into its `docker load`, checks there that the image id and the
    imgbuild labels match, and only then moves the image's tags. A node that
    lacks the base is refused unless --with-base; a node that fails is named
    and the others still finish (exit 7 if any failed).

    Examples:

      imgbuild ship latest --to ssh://nvidia@spark-1 --to ssh://nvidia@spark-2

      imgbuild ship engram-mem --to spark-1 --to spark-2 --json    # docker context names

      imgbuild ship latest --to tcp://10.0.0.7:2375 --with-base
    """
    from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TransferSpeedColumn
    from rich.table import Table

    from imgbuild.deploy.ship import ship
    from imgbuild.images.docker import Engine
    from imgbuild.project import load_project
    from imgbuild.report.tables import console, err_console, print_json

    project = load_project()
    v = project.variant(variant)
    repo = v.image.repository
    if image is None and not (repo and v.image.tags):
        raise UsageError(f"variant {variant} has no image repository or tag; give --image")
    ref = image or f"{repo}:{v.image.tags[0]}"
    engine = Engine.connect()
    info = engine.require(ref)
    if image is None and info.labels.get("imgbuild.variant") != variant:
        raise DockerError(f"{ref} is not an imgbuild image of variant {variant}", hint=f"imgbuild build {variant}")
    tags = sorted(t for t in info.tags if repo and t.startswith(f"{repo}:")) or ([ref] if ":" in ref else [])
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), DownloadColumn(), TransferSpeedColumn(),
        console=err_console, transient=True, disable=as_json,
    ) as bar:  # fmt: skip
        tasks = {n: bar.add_task(n, total=None) for n in to}
        done = ship(
            engine, ref, tags, to, with_base=with_base, jobs=jobs,
            progress=lambda node, sent: bar.update(tasks[node], completed=sent),
        )  # fmt: skip
    if as_json:
        print_json(done.to_json())
    else:
        table = Table(title=f"ship {ref} ({done.image_id[:19]}, {done.full_size / 1e6:.1f} MB as docker save)")
        for col in ("node", "status", "sent", "layers sent/held", "seconds", "error"):
            table.add_column(col)
        for r in done.results:
            table.add_row(
                r.node, r.status, f"{r.bytes_sent / 1e6:.3f} MB", f"{r.layers_sent}/{r.layers_held}",
                f"{r.seconds:.2f}", r.error + (f" ({r.hint})" if r.hint else ""),
            )  # fmt: skip
        console.print(table)
        for r in done.results:
            if r.note:
                console.print(f"[yellow]note[/]: {r.node}: {r.note}")
    failed = [r.node for r in done.results if not r.ok]
    if failed:
        raise DockerError(
            f"shipping failed on {len(failed)} of {len(to)} node(s): {', '.join(failed)}", reported=as_json
        )
