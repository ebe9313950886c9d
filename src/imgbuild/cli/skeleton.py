"""`imgbuild skeleton`: build the offline stand-in base image."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild import build as engine
from imgbuild import skeleton as skel
from imgbuild.cli.build import VerboseOpt
from imgbuild.cli.options import JsonOpt
from imgbuild.config import check_platform
from imgbuild.docker_engine import Engine
from imgbuild.project import load_project
from imgbuild.report import print_json
from imgbuild.upstream import cache_dir


def skeleton(
    platform: Annotated[str, typer.Option("--platform", help="Platform of the stand-in.")] = "linux/arm64",
    site_packages: Annotated[
        str | None,
        typer.Option(
            "--site-packages", help=f"Where vllm/ goes (default: image.site_packages, else {skel.SITE_PACKAGES})."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Load the image again even if present (the rootfs stays cached).")
    ] = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the skeleton base: a Debian rootfs with python3 plus the pinned release's vllm/ tree.

    Offline after the first run: the rootfs (mmdebstrap, about a minute) is cached under
    the user cache directory and the image is tagged by a digest of its inputs. Build
    variants on it with `imgbuild build --base skeleton`. It has no torch: smoke
    commands marked for real bases are skipped on it.
    """
    project = load_project()
    if site_packages is None:
        sites = {v.image.site_packages for v in project.variants.values() if v.image.site_packages}
        site_packages = sites.pop() if len(sites) == 1 else None
    check_platform(platform)
    spec = engine.skeleton_spec(project, site_packages, platform)
    info = skel.ensure_skeleton(
        Engine.connect(), spec, project.upstream.repo, cache_dir(), force=force, verbose=verbose
    )
    if as_json:
        print_json(
            {
                "tag": spec.tag,
                "image_id": info.id,
                "platform": info.platform,
                "site_packages": spec.site_packages,
                "upstream_commit": spec.upstream_commit,
                "rootfs": str(skel.rootfs_path(spec.rootfs, cache_dir())),
            }
        )
        return
    print(spec.tag)
