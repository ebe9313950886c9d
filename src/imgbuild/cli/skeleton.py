"""`imgbuild skeleton`: build the offline stand-in base image."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.build import VerboseOpt
from imgbuild.cli.options import JsonOpt
from imgbuild.errors import UpstreamError, UsageError

if TYPE_CHECKING:
    from imgbuild.builder.runtime_lock import Lock
    from imgbuild.project import Project

# images.skeleton.SITE_PACKAGES, spelled here so --help loads no image code (tests/git/test_cli.py checks it)
SITE_PACKAGES = "/usr/local/lib/python3.12/dist-packages"


def skeleton(
    platform: Annotated[str, typer.Option("--platform", help="Platform of the stand-in.")] = "linux/arm64",
    site_packages: Annotated[
        str | None,
        typer.Option("--site-packages", help=f"Where vllm/ goes (default: image.site_packages, else {SITE_PACKAGES})."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Build the image again even if present (the rootfs stays cached).")
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
    from imgbuild.builder import bases
    from imgbuild.builder import runtime_base as rb
    from imgbuild.builder import runtime_lock as rl
    from imgbuild.builder import skeleton as skel
    from imgbuild.config.models import check_platform
    from imgbuild.engine import Engine
    from imgbuild.platforms import Platform
    from imgbuild.project import load_project
    from imgbuild.report.documents import images as docs
    from imgbuild.report.tables import print_json
    from imgbuild.upstream.mirror import cache_dir
    from imgbuild.upstream.requires import overrides_in_effect

    project = load_project()
    if site_packages is None:
        sites = {v.image.site_packages for v in project.variants.values() if v.image.site_packages}
        site_packages = sites.pop() if len(sites) == 1 else None
    check_platform(platform)
    if relock and not runtime:
        raise UsageError("--relock goes with --runtime", hint="imgbuild skeleton --runtime --relock --platform P")
    if runtime:
        if relock:
            if project.pin_problems:
                raise UpstreamError(
                    "the pins disagree, so the runtime lock cannot hold them all: " + "; ".join(project.pin_problems),
                    hint="bump the required pin, or write an override with its reason under it in "
                    "patches/upstream.yaml (docs/configuration.md)",
                )
            overrides = overrides_in_effect(project.pin_needs)
            rb.relock(project.root, Platform.parse(platform), project.pin.version, overrides=overrides, verbose=verbose)
        rspec = bases.runtime_spec(project, site_packages, platform)
        res = rb.ensure_runtime(Engine.connect(), rspec, cache_dir(), force=force, verbose=verbose)
        if as_json:
            print_json(
                docs.SkeletonRuntime.of(
                    {
                        "tag": rspec.tag,
                        "image_id": res.info.id,
                        "platform": str(res.info.platform),
                        "site_packages": rspec.site_packages,
                        "lock": str(rl.LOCK_DIR / rl.lock_name(rspec.platform)),
                        "lock_digest": rspec.lock.digest(),
                        "wheels": len(rspec.lock.pins),
                        "upstreams": pins_json(project, rspec.lock),
                        "built": res.built,
                        "image_bytes": res.info.size,
                        "seconds": round(res.seconds, 1),
                    }
                )
            )
        else:
            print(rspec.tag)
        return
    spec = bases.skeleton_spec(project, site_packages, platform)
    repos = bases.pin_repos(project)
    info = skel.ensure_skeleton(Engine.connect(), spec, repos, cache_dir(), force=force, verbose=verbose)
    if as_json:
        print_json(
            docs.Skeleton.of(
                {
                    "tag": spec.tag,
                    "image_id": info.id,
                    "platform": str(info.platform),
                    "site_packages": spec.site_packages,
                    "upstream_commit": spec.upstream_commit,
                    "upstreams": pins_json(project, None),
                    "rootfs": str(skel.rootfs_path(spec.rootfs, cache_dir())),
                }
            )
        )
    else:
        print(spec.tag)


def pins_json(project: Project, lock: Lock | None) -> list[dict[str, object]]:
    """Every pin (the first first) as the base carries it; with a runtime lock, the version it locks of each wheel."""
    from imgbuild.config.models import WheelSource

    out: list[dict[str, object]] = []
    for p in project.pins:
        entry: dict[str, object] = {"name": p.name, "tag": p.tag, "commit": p.commit, "package_root": p.package_root}
        if lock is not None:
            project_name = p.source.project if isinstance(p.source, WheelSource) else p.name
            locked = lock.pin(project_name)
            entry["locked"] = locked.version if locked else None
        out.append(entry)
    return out
