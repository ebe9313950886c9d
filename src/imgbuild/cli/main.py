"""The `imgbuild` command. Errors are caught and printed in one place: `run`."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def _interrupted_at_start(_signum: int, _frame: FrameType | None) -> None:
    # Ctrl-C while the imports below run: nothing has started, so leave at once, without a traceback.
    if "--json" in sys.argv:
        os.write(
            1, b'{"error": {"type": "Interrupted", "message": "interrupted; nothing was changed", "exit_code": 130}}\n'
        )
    os.write(2, b"interrupted; nothing was changed\n")
    os._exit(130)


try:
    _PREVIOUS_SIGINT = signal.signal(signal.SIGINT, _interrupted_at_start)
except ValueError:  # not the main thread (imported by a test runner): leave signals alone
    _PREVIOUS_SIGINT = None

import difflib  # noqa: E402 - after the handler, so Ctrl-C during imports is answered
import importlib  # noqa: E402
import json  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Annotated, Any, NamedTuple  # noqa: E402

import typer  # noqa: E402
from typer.core import TyperCommand, TyperGroup  # noqa: E402

from imgbuild import __version__  # noqa: E402
from imgbuild.errors import INTERRUPTED, ExitCode, ImgbuildError, Interrupted, error_json  # noqa: E402


@dataclass(frozen=True)
class CliOptions:
    """What `imgbuild`'s own options choose for every subcommand: typer's context object (`ctx.obj`).
    project.find_root reads `project` from it."""

    project: Path | None = None


class Command(NamedTuple):
    """A subcommand, imported only when it runs: `module:attr` is a function or a typer app.
    `help` is its one-line summary, kept here so that `imgbuild --help` imports no subcommand
    module (tests/git/test_cli.py checks it matches the command's own docstring)."""

    module: str
    attr: str
    help: str


# Register a subcommand with one line here. `patches check` then never pays for the
# docker and registry clients, and `--help` for none of them.
COMMANDS: dict[str, Command] = {
    "quickstart": Command(
        "imgbuild.cli.quickstart",
        "quickstart",
        "Build the stand-in base, then build, smoke-test and tag every variant on it.",
    ),
    "plan": Command("imgbuild.cli.plan", "plan", "Show which files each image variant carries patched or original."),
    "patches": Command(
        "imgbuild.cli.patches",
        "app",
        "Work with the patch stack in patches/ (a quilt series of DEP-3 headed git diffs).",
    ),
    "build": Command(
        "imgbuild.cli.build",
        "build",
        "Build variant images with BuildKit and tag them after they pass their smoke test.",
    ),
    "smoke": Command(
        "imgbuild.cli.smoke",
        "smoke_cmd",
        "Smoke-test images: config, file states, then runtime (under qemu if the arch differs).",
    ),
    "inspect": Command(
        "imgbuild.cli.inspect",
        "inspect",
        "Show what an image says it carries, re-hash its files, and name every disagreement.",
    ),
    "skeleton": Command(
        "imgbuild.cli.skeleton",
        "skeleton",
        "Build the skeleton base: a Debian rootfs with python3 plus the pinned release's vllm/ tree.",
    ),
    "lock": Command(
        "imgbuild.cli.lock", "lock", "Resolve each variant's base tag to a digest per platform and write images.lock."
    ),
    "bake": Command(
        "imgbuild.cli.bake", "bake", "Generate buildkit/docker-bake.json (committed) and buildkit/context/ (generated)."
    ),
    "publish": Command(
        "imgbuild.cli.publish",
        "publish",
        "Publish each variant's platform images and a multi-arch index, without pulling the base.",
    ),
    "recipe": Command(
        "imgbuild.cli.recipe",
        "recipe",
        "Write a sparkrun recipe and a docker compose file for VARIANT with a launch profile.",
    ),
}


def load_command(name: str) -> Any:
    """Import the subcommand's module and build its click command."""
    spec = COMMANDS[name]
    target = getattr(importlib.import_module(spec.module), spec.attr)
    if not isinstance(target, typer.Typer):
        function = target
        target = typer.Typer()
        target.command(name)(function)
    command = typer.main.get_command(target)
    command.name = name
    return command


class LazyGroup(TyperGroup):
    """Subcommands are imported when resolved to run; the help listing uses the static summaries."""

    def list_commands(self, _ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if getattr(ctx, "_imgbuild_listing", False):
            return TyperCommand(cmd_name, short_help=COMMANDS[cmd_name].help)
        return load_command(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        ctx._imgbuild_listing = True  # only the listing calls get_command while help is formatted
        try:
            super().format_help(ctx, formatter)
        finally:
            ctx._imgbuild_listing = False

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except typer.TyperException as exc:  # typer suggests from self.commands, which a lazy group leaves empty
            message = getattr(exc, "message", None)
            if args and isinstance(message, str) and "Did you mean" not in message:
                close = difflib.get_close_matches(args[0], list(COMMANDS))
                if close:
                    suggestion = ", ".join(map(repr, close))
                    exc.message = f"{message.rstrip('.')}. Did you mean {suggestion}?"
            raise


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
    rich_markup_mode=None,  # plain click help at the top: rich.markdown and pygments cost more than the rest of --help
)


def _version(value: bool) -> None:
    if value:
        print(f"imgbuild {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    project: Annotated[
        Path | None,
        typer.Option("--project", "-C", help="Project directory (default: the nearest parent with patches/series)."),
    ] = None,
    version: Annotated[  # noqa: ARG001 - typer acts on it in its callback, _version
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    ctx.obj = CliOptions(project=project.resolve() if project is not None else None)


def _raise_interrupted(_signum: int, _frame: FrameType | None) -> None:
    raise Interrupted()


def _fail(as_json: bool, kind: str, message: str, hint: str | None, code: int, details: dict[str, object]) -> None:
    if as_json:
        print(json.dumps(error_json(kind, message, hint, code, details), indent=2), flush=True)
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    sys.exit(code)


def run() -> None:
    """Entry point. Every error, click's usage errors included, is printed here, and under
    --json as the one JSON document on stdout."""
    try:
        previous = signal.signal(signal.SIGINT, _raise_interrupted)
    except ValueError:  # not the main thread
        previous = None
    try:
        _run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _run() -> None:
    as_json = "--json" in sys.argv
    try:
        code = app(standalone_mode=False)
    except ImgbuildError as exc:  # `reported`: under --json the command's own report is the one document
        _fail(as_json and not exc.reported, type(exc).__name__, exc.message, exc.hint, exc.exit_code, exc.details)
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        exit_code = int(getattr(exc, "exit_code", 2))
        if as_json:
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            print(json.dumps(error_json("UsageError", message, None, exit_code), indent=2))
        from typer import rich_utils

        rich_utils.rich_format_error(exc)  # type: ignore[arg-type]
        sys.exit(exit_code)
    except (Interrupted, KeyboardInterrupt, typer.Abort):
        if as_json:
            print(json.dumps(error_json("Interrupted", INTERRUPTED, None, 130)), flush=True)
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
    except OSError as exc:  # a path the OS refused that no command foresaw: still one line, no traceback
        where = f": {exc.filename}" if exc.filename else ""
        _fail(as_json, "OSError", f"{exc.strerror or exc}{where}", "check the path and the disk", ExitCode.STATE, {})
    sys.exit(code if isinstance(code, int) else 0)


if _PREVIOUS_SIGINT is not None:
    signal.signal(signal.SIGINT, _PREVIOUS_SIGINT)
