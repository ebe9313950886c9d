"""The `imgbuild` command. Errors are caught and printed in one place: `run`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import click
import typer

from imgbuild import __version__
from imgbuild.cli import bake as bake_cmd
from imgbuild.cli import build, inspect, patches, patchwork, plan, quickstart, skeleton, smoke
from imgbuild.cli import lock as lock_cmd
from imgbuild.cli import publish as publish_cmd
from imgbuild.errors import ExitCode, ImgbuildError

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
)
app.add_typer(patches.app, name="patches")
patchwork.register(patches.app)  # patches rebase / edit / refresh
app.command("plan")(plan.plan)
app.command("build")(build.build)
app.command("smoke")(smoke.smoke_cmd)
app.command("inspect")(inspect.inspect)
app.command("skeleton")(skeleton.skeleton)
app.command("quickstart")(quickstart.quickstart)
app.command("lock")(lock_cmd.lock)
app.command("publish")(publish_cmd.publish)
app.command("bake")(bake_cmd.bake)


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
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    if project is not None:
        os.environ["IMGBUILD_PROJECT"] = str(project.resolve())


def run() -> None:
    as_json = "--json" in sys.argv
    try:
        rv = app(standalone_mode=False)
    except ImgbuildError as exc:
        if as_json:
            print(json.dumps(exc.to_json(), indent=2))
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(ExitCode.USAGE)
    except KeyboardInterrupt:
        print("interrupted; nothing was changed", file=sys.stderr)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
