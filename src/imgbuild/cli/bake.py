"""`imgbuild bake`: generate buildkit/docker-bake.json and its build context."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild.cli.options import JsonOpt
from imgbuild.errors import CheckFailed


def bake(
    check: Annotated[
        bool, typer.Option("--check", help="Fail (exit 1) when the bake file (or a present context) is out of date.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Generate buildkit/docker-bake.json (committed) and buildkit/context/ (generated).

    One target per variant: platforms, tags (immutable `<version>-<inputs>` and
    the moving ones, under ${REGISTRY}), labels from the inputs, an inline
    Dockerfile on the base locked in images.lock, provenance off, and GitHub
    Actions cache scoped by ${CACHE_PREFIX}. Like `imgbuild build`'s layers, each
    layer carries the checked-hash bytecode of its modules, compiled by the base's
    own python3 in a stage of the Dockerfile (one RUN per platform: the base needs
    python3; under emulation for a foreign platform). Run buildx from the
    repository root:

      imgbuild bake && docker buildx bake -f buildkit/docker-bake.json --load \\
          --set '*.platform=linux/arm64' engram-mem

      imgbuild bake --check                      # CI and tests: fail when stale

      docker buildx bake -f buildkit/docker-bake.json --print   # the targets
    """
    from imgbuild.cli.options import load_project
    from imgbuild.plan import bake as bakemod
    from imgbuild.plan.inputs import project_inputs
    from imgbuild.registry.lock import load_lock
    from imgbuild.report.documents import images as docs
    from imgbuild.report.tables import console, err_console, print_json

    project = load_project()
    lock = load_lock(project.root)
    result = bakemod.make_bake(project_inputs(project), project.plan(), lock)
    unlocked = [t.variant for t in result.targets if not t.locked]
    if unlocked:
        err_console.print(
            f"warning: images.lock does not pin the base of {', '.join(unlocked)}; "
            "the bake file names the bare tag (run `imgbuild lock`)",
            soft_wrap=True,
        )
    if check:
        checked = bakemod.check(project.root, result)
        if as_json:
            print_json(docs.BAKE_CHECK.of(checked))
        if not checked.ok:
            raise CheckFailed(
                "\n  ".join(["the bake file is stale:", *checked.problems]),
                hint="run `imgbuild bake` and commit buildkit/docker-bake.json",
                reported=as_json,
            )
        if not as_json:
            console.print(f"{bakemod.BAKE_FILE} is up to date ({len(result.targets)} targets)")
        return
    baked = bakemod.write(project.root, result)
    if as_json:
        print_json(docs.BAKE.of(baked))
        return
    wrote, ctx = baked.changed, baked.context_changed
    console.print(f"{bakemod.BAKE_FILE} {'written' if wrote else 'unchanged'}; {bakemod.CONTEXT_DIR}/ "
                  f"{'written' if ctx else 'unchanged'} ({len(result.context)} files)")  # fmt: skip
    for t in result.targets:
        console.print(
            f"  {t.variant}: {', '.join(t.platforms)}; layers {', '.join(t.layers) or '-'}; {t.immutable_tag}"
        )
