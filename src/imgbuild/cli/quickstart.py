"""`imgbuild quickstart`: the README's one command, offline after the first run."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild.cli import build as build_cmd
from imgbuild.cli.build import RepoOpt, VerboseOpt
from imgbuild.cli.options import JsonOpt


def quickstart(
    repository: RepoOpt = None,
    platform: Annotated[
        str, typer.Option("--platform", help="Platform of the stand-in base and the images.")
    ] = "linux/arm64",
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the stand-in base, then build, smoke-test and tag every variant on it.

    Same as `imgbuild skeleton` followed by `imgbuild build --base skeleton`: a Debian
    rootfs with python3 and the pinned release's vllm/ tree stands in for the stock
    vLLM image (which no registry here serves), and every variant in images/ is built
    on it with shared layers, smoke-tested, and tagged (e.g. vllm-dsv41:latest and
    vllm-dsv41:engram-mem). The first run downloads the pinned wheel and Debian
    packages; later runs are offline and reuse everything whose inputs are unchanged.
    """
    from imgbuild.report.tables import console

    if not as_json:
        console.print(f"[bold]imgbuild quickstart[/]: every variant on the skeleton base ({platform})")
    build_cmd.build(base="skeleton", repository=repository, platform=platform, verbose=verbose, as_json=as_json)
    if not as_json:
        repo = repository or "vllm-dsv41"
        console.print(f"next: `imgbuild smoke {repo}:latest --static`, `imgbuild smoke engram-mem --base skeleton`")
