"""`imgbuild history VARIANT` and `imgbuild rollback VARIANT --to TAG|DIGEST`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imgbuild.cli.build import RepoOpt
from imgbuild.cli.options import JsonOpt

VariantArg = Annotated[str, typer.Argument(metavar="VARIANT", help="Image variant (a file in images/).")]
RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry", help="Also look at (history) or move (rollback) the tags in this registry (HOST[:PORT])."
    ),
]


def history(
    variant: VariantArg, registry: RegistryOpt = None, repository: RepoOpt = None, as_json: JsonOpt = False
) -> None:
    """List VARIANT's builds still in the local image store, newest first.

    Each build is an immutable tag (REPO:<version>-<inputs digest>) with what its
    labels say: its image id and each platform's image, the upstream release(s) and
    commit, the patch series digest and which patches it applies or reverts, the base
    and its digest, and `created` (the newest input's date: labels carry no wall
    clock, so that equal inputs give equal digests). Also the engine's last tag time,
    whether its last smoke test here passed, and which moving tags name it now. With
    --registry, whether the registry has it at the same digest and which of the
    registry's moving tags name it. `imgbuild rollback` puts the moving tags back on one.

    Examples:

      imgbuild history latest

      imgbuild history engram-mem --json

      imgbuild history latest --registry 127.0.0.1:5000
    """
    from imgbuild.cli.options import load_project
    from imgbuild.deploy import history as hist
    from imgbuild.engine import Engine
    from imgbuild.report.documents import deploy as docs
    from imgbuild.report.history import history_lines
    from imgbuild.report.tables import console, print_json

    resolved = load_project().variant(variant)
    found = hist.read(Engine.connect(), resolved, repository)
    if registry:
        found = hist.read_registry(found, registry)
    if as_json:
        print_json(docs.HISTORY.of(found))
        return
    for line in history_lines(found):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def rollback(
    variant: VariantArg,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="The build to go back to: its immutable tag (TAG or REPO:TAG) or its digest (sha256:... or "
            "REPO@sha256:...), as `imgbuild history` lists them.",
        ),
    ],
    no_smoke: Annotated[
        bool, typer.Option("--no-smoke", help="Move the tags without smoke-testing the target.")
    ] = False,
    registry: RegistryOpt = None,
    recipe: Annotated[
        Path | None,
        typer.Option("--recipe", help="A sparkrun recipe `imgbuild recipe` wrote: rewrite it to pin the target."),
    ] = None,
    repository: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Put VARIANT's moving tags back on one of its earlier builds.

    The target must be a build of VARIANT in the local store: an image of another
    variant, or one without imgbuild's labels, is refused (exit 2). It is
    smoke-tested first, each platform against its own labels and the variant's smoke
    commands (exit 8 on a failure). The moving tags (e.g. `latest`) then move locally
    and, with --registry, in the registry, where the target's immutable tag must already
    be at the same digest (exit 9 otherwise). The digest is kept: one `imagetools
    create` for a multi-platform image, a `docker push` of the tag for one platform. A
    refusal or a failed smoke test moves nothing. Then the sparkrun recipe pinned to the target: --recipe
    rewrites that file, else each launch profile's recipe for VARIANT is printed, so
    that `sparkrun run` puts the image on the nodes with its own distribution.

    Examples:

      imgbuild rollback latest --to 0.33.0-2a6da4c5ddd6

      imgbuild rollback latest --to sha256:4f1e... --registry 127.0.0.1:5000 --recipe deploy/out/latest-tp8-1m.yaml

      imgbuild rollback engram-mem --to 0.33.0-2a6da4c5ddd6 --no-smoke --json
    """
    from imgbuild.cli.options import load_project
    from imgbuild.deploy import history as hist
    from imgbuild.engine import Engine
    from imgbuild.report.documents import deploy as docs
    from imgbuild.report.history import rollback_lines
    from imgbuild.report.tables import console, print_json
    from imgbuild.smoke.expected import importer_finder

    project = load_project()
    resolved = project.variant(variant)
    engine = Engine.connect()
    found = hist.read(engine, resolved, repository)
    finder = None if no_smoke else importer_finder(project)
    result = hist.rollback(
        engine, found, to, spec=resolved, importers=finder, run_smoke=not no_smoke, registry=registry
    )
    recipes = hist.pin_recipes(project, result, recipe)
    if as_json:
        print_json(docs.ROLLBACK.of(result.with_recipes(recipes, rewritten=recipe is not None)))
        return
    for line in rollback_lines(result, recipes, rewritten=recipe is not None):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
