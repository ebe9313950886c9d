"""The `imgbuild` command. Errors are caught and printed in one place: `run`."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from imgbuild import __version__
from imgbuild.errors import ImgbuildError

# Subcommands, imported only when used: `patches check` then never pays for
# the docker and registry clients, which keeps start-up well under a second.
COMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": ("imgbuild.cli.quickstart", "quickstart"),
    "plan": ("imgbuild.cli.plan", "plan"),
    "patches": ("imgbuild.cli.patches", "app"),
    "build": ("imgbuild.cli.build", "build"),
    "smoke": ("imgbuild.cli.smoke", "smoke_cmd"),
    "inspect": ("imgbuild.cli.inspect", "inspect"),
    "skeleton": ("imgbuild.cli.skeleton", "skeleton"),
    "lock": ("imgbuild.cli.lock", "lock"),
    "bake": ("imgbuild.cli.bake", "bake"),
    "publish": ("imgbuild.cli.publish", "publish"),
    "recipe": ("imgbuild.cli.recipe", "recipe"),
    "ship": ("imgbuild.cli.ship", "ship_cmd"),
}


class LazyGroup(TyperGroup):
    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        target = getattr(importlib.import_module(module), attr)
        if not isinstance(target, typer.Typer):
            target = typer.Typer()
            target.command(cmd_name)(getattr(importlib.import_module(module), attr))
        command = typer.main.get_command(target)
        command.name = cmd_name
        return command


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
    cls=LazyGroup,
)


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
    """Entry point. Usage errors are click's (exit 2); ours are printed here."""
    as_json = "--json" in sys.argv
    try:
        app()
    except ImgbuildError as exc:
        if as_json:
            print(json.dumps(exc.to_json(), indent=2))
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted; nothing was changed", file=sys.stderr)
        sys.exit(130)
