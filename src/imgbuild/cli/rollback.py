"""`imgbuild rollback VARIANT [--to TAG]`: move the variant's moving tags back to an immutable tag."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild.cli.build import RepoOpt
from imgbuild.cli.history import _refs
from imgbuild.cli.options import JsonOpt


def rollback(
    variant: Annotated[str, typer.Argument(metavar="VARIANT", help="Image variant (a file in images/).")],
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="The immutable tag to go back to (REPO:TAG or just TAG); default: the newest one older than "
            "what the moving tags name now.",
        ),
    ] = None,
    repository: RepoOpt = None,
    no_smoke: Annotated[
        bool, typer.Option("--no-smoke", help="Move the tags without smoke-testing the target first.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Move VARIANT's moving tags (e.g. `latest`) back to one of its immutable tags.

    The target must be in `imgbuild history VARIANT`: its labels must say it is
    this variant (imgbuild.variant) and it must be in this project's repository;
    anything else is refused (exit 2) and nothing moves. The target is
    smoke-tested first against its own labels and the variant's smoke commands
    (exit 8 on a failure, nothing moved). Prints what each moving tag named
    before and names now. `imgbuild recipe VARIANT --profile P` then pins the
    rolled-back image's immutable tag (or pin any with --image TAG).

    Examples:

      imgbuild rollback latest

      imgbuild rollback engram-mem --to 0.33.0-2a6da4c5ddd6 --json
    """
    from imgbuild.builder import history as hist
    from imgbuild.engine import Engine
    from imgbuild.project import load_project
    from imgbuild.report.history import rollback_lines
    from imgbuild.report.tables import console, print_json
    from imgbuild.upstream.mirror import cache_dir

    project = load_project()
    resolved = project.variant(variant)
    repo, moving = _refs(resolved, repository)
    if not moving:
        from imgbuild.errors import ConfigError

        raise ConfigError(f"images/{variant}.yaml: no image.tags, so there is no moving tag to move")
    engine = Engine.connect()
    found = hist.read(engine, cache_dir(), repo, variant, moving)
    result = hist.rollback(engine, found, to, resolved.smoke, run_smoke=not no_smoke)
    if as_json:
        print_json("rollback", result.to_json())
        return
    for line in rollback_lines(result):
        console.print(line, markup=False, highlight=False)
