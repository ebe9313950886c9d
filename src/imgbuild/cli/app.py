"""The `imgbuild` typer app: its own options and one line per command. Run through `cli.main.run`,
which prints every error."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imgbuild import __version__
from imgbuild.cli import (
    bake,
    build,
    history,
    lock,
    plan,
    publish,
    recipe,
    skeleton,
    smoke,
)
from imgbuild.cli.options import CHOSEN
from imgbuild.cli.patches.app import app as patches_app

app = typer.Typer(
    name="imgbuild",
    help=(
        "Build Docker images of patched vLLM for NVIDIA DGX Spark (GB10, SM 12.1a).\n\n"
        "imgbuild keeps a quilt series of patches against a pinned vLLM release "
        "(patches/), resolves image variants (images/*.yaml) to exact file plans, "
        "and builds, smoke-tests and publishes the images.\n\n"
        "Start with `imgbuild plan` to see which files each image carries."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help at the top
)

# One line per command, in the order `imgbuild --help` lists them.
app.command("plan")(plan.plan)
app.add_typer(patches_app, name="patches")
app.command("build")(build.build)
app.command("smoke")(smoke.smoke_cmd)
app.command("skeleton")(skeleton.skeleton)
app.command("lock")(lock.lock)
app.command("bake")(bake.bake)
app.command("publish")(publish.publish)
app.command("recipe")(recipe.recipe)
app.command("history")(history.history)
app.command("rollback")(history.rollback)


def _version(value: bool) -> None:
    if value:
        print(f"imgbuild {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    project: Annotated[
        Path | None,
        typer.Option("--project", "-C", help="Project directory (default: the nearest parent with patches/series)."),
    ] = None,
    version: Annotated[  # noqa: ARG001 - typer acts on it in its callback, _version
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    CHOSEN.set(project.resolve() if project is not None else None)  # cli.options.find_root/load_project read it
