"""`imgbuild smoke`: smoke-test a variant's image, or any image by reference."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.build import BaseOpt, PlatformOpt, RepoOpt, options
from imgbuild.cli.options import JsonOpt
from imgbuild.errors import ConfigError, SmokeError

if TYPE_CHECKING:
    from imgbuild.smoke.report import SmokeRun


def smoke_cmd(
    targets: Annotated[list[str], typer.Argument(help="Variant names (their current image) or image references.")],
    base: BaseOpt = None,
    repository: RepoOpt = None,
    platform: PlatformOpt = None,
    static: Annotated[
        bool, typer.Option("--static", help="Config and file checks only; run nothing in the image.")
    ] = False,
    pub_key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="cosign public key: also verify the signature of what a registry reference names and the "
            "platform image's SPDX SBOM (registry references only; see `publish --sign --sbom`).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Smoke-test images: config, file states, then runtime (under qemu if the arch differs).

    A VARIANT is checked against the current plan (build it first), an IMAGE against its
    own labels. With --key, a registry image's signature and SBOM are verified too.
    Exit status 8 when a check fails or the signature or the SBOM is not verified.

    Examples:

      imgbuild smoke latest engram-mem --base skeleton

      imgbuild smoke vllm-dsv41:latest --json

      imgbuild smoke REG/vllm-dsv41:latest --static --platform linux/arm64 --key cosign.pub
    """
    from imgbuild.cli.options import load_project
    from imgbuild.deploy import smoke_run
    from imgbuild.engine import Engine
    from imgbuild.project import Project

    try:
        project: Project | None = load_project()
    except ConfigError:  # image references need no project
        project = None
    chosen = smoke_run.targets_of(project, targets, platform, pub_key)
    eng = Engine.connect()  # after the checks of what was asked: a bad option needs no daemon
    _print_and_exit(smoke_run.run(eng, project, chosen, options(base, repository), static=static), as_json=as_json)


def _print_and_exit(run: SmokeRun, *, as_json: bool) -> None:
    """Every report (and --key's verdicts); exit 8 when a check failed or a signature or an SBOM is not verified."""
    from imgbuild.report.documents import images as docs
    from imgbuild.report.images import checks_table, file_matrix, supply_chain_lines
    from imgbuild.report.tables import console, print_json
    from imgbuild.smoke.checks import summary

    failed = run.failed
    if as_json:
        print_json(docs.SMOKE.of(run))
    else:
        for r in run.reports:
            console.print(checks_table(r))
            if r.supply_chain is not None:
                for line in supply_chain_lines(r.supply_chain):
                    console.print(line, highlight=False)
        console.print(file_matrix([(r.title, r.files) for r in run.reports]))
        console.print(summary(run.reports))
    if failed:  # under --json the document above already says what failed: only the error line (stderr)
        raise SmokeError(
            "smoke test failed: " + "; ".join(failed),
            hint="see the table above (or --json) for each failing check",
            reported=as_json,
        )
