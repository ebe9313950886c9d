"""`imgbuild skeleton`: build the offline stand-in base image."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild.cli.build import VerboseOpt
from imgbuild.cli.options import JsonOpt

# images.skeleton.SITE_PACKAGES, spelled here so --help loads no image code (tests/git/test_cli.py checks it)
SITE_PACKAGES = "/usr/local/lib/python3.12/dist-packages"


def skeleton(
    platform: Annotated[str, typer.Option("--platform", help="Platform of the stand-in.")] = "linux/arm64",
    site_packages: Annotated[
        str | None,
        typer.Option("--site-packages", help=f"Where vllm/ goes (default: image.site_packages, else {SITE_PACKAGES})."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Build the image again even if present (the rootfs stays cached; the runtime base is built "
            "without BuildKit's cache).",
        ),
    ] = False,
    runtime: Annotated[
        bool,
        typer.Option(
            "--runtime",
            help="Build the runtime base instead: the skeleton plus every wheel of images/runtime-lock/<platform>.txt "
            "(torch, vLLM's requirements), so `import vllm` works. uv downloads them once (GBs) into its cache.",
        ),
    ] = False,
    relock: Annotated[
        bool,
        typer.Option(
            "--relock", help="With --runtime: resolve the pinned vllm's requirements again with uv (network) first."
        ),
    ] = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the skeleton base: a Debian rootfs with python3 plus the pinned release's vllm/ tree.

    Offline after the first run (the rootfs is cached; the image is tagged by a digest of its inputs). Build
    variants on it with `imgbuild build --base skeleton`. It has no torch: smoke commands marked for real bases
    are skipped on it. With --runtime it builds the runtime base (`imgbuild build --base runtime`): the locked
    wheels installed on the host by uv, tagged by the lock's digest; a warm run downloads and builds nothing.

    Examples:
      imgbuild skeleton --platform linux/arm64
      imgbuild skeleton --runtime --platform linux/amd64 --json
      imgbuild skeleton --runtime --relock --platform linux/arm64
    """
    from imgbuild.builder import standin
    from imgbuild.cli.options import load_project
    from imgbuild.report.documents import images as docs
    from imgbuild.report.tables import print_json

    made = standin.make(
        load_project(), platform, site_packages, runtime=runtime, force=force, relock=relock, verbose=verbose
    )
    if not as_json:
        print(made.tag)
    elif isinstance(made, standin.RuntimeMade):
        print_json(docs.SKELETON_RUNTIME.of(made))
    else:
        print_json(docs.SKELETON.of(made))
