"""`imgbuild skeleton`: the stand-in bases made on their own (the offline skeleton, or the runtime base), with what
the command reports of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from imgbuild.builder import bases
from imgbuild.builder import skeleton as skel
from imgbuild.cache import cache_dir
from imgbuild.config.models import Upstream, WheelSource
from imgbuild.engine import Engine
from imgbuild.errors import UpstreamError, UsageError
from imgbuild.platforms import Platform
from imgbuild.project import Project

if TYPE_CHECKING:
    from imgbuild.builder.runtime_lock import RuntimeLock


@dataclass(frozen=True)
class LockedUpstream(Upstream):
    locked: Annotated[str | None, Field(description="the version the runtime lock has of the pin's project")]


@dataclass(frozen=True)
class SkeletonMade:
    """The stand-in base image made."""

    tag: str
    image_id: str
    platform: str
    site_packages: str
    upstream_commit: str
    upstreams: Annotated[tuple[Upstream, ...], Field(description="every pin, the first first")]
    rootfs: str


@dataclass(frozen=True)
class RuntimeMade:
    """The runtime base image made (or found up to date)."""

    tag: str
    image_id: str
    platform: str
    site_packages: str
    lock: str  # the lock file, relative to the project
    lock_digest: str
    wheels: int
    upstreams: Annotated[
        tuple[LockedUpstream, ...],
        Field(
            description="every pin, the first first, with the version the runtime lock has of its project (`locked`)"
        ),
    ]
    built: bool
    image_bytes: int
    seconds: float


def site_packages_of(project: Project, given: str | None) -> str | None:
    """`--site-packages`, else the variants' one image.site_packages (None when they differ or none is set)."""
    if given is not None:
        return given
    sites = {v.image.site_packages for v in project.variants.values() if v.image.site_packages}
    return sites.pop() if len(sites) == 1 else None


def make_skeleton(
    project: Project, platform: Platform, site_packages: str | None, *, force: bool = False, verbose: bool = False
) -> SkeletonMade:
    """The offline stand-in for `platform`: built when the engine lacks it (the rootfs is cached)."""
    spec = bases.skeleton_spec(project, site_packages_of(project, site_packages), platform)
    info = skel.ensure_skeleton(
        Engine.connect(), spec, bases.pin_repos(project), cache_dir(), force=force, verbose=verbose
    )
    return SkeletonMade(
        tag=spec.tag,
        image_id=info.id,
        platform=str(info.platform),
        site_packages=spec.site_packages,
        upstream_commit=spec.upstream_commit,
        upstreams=tuple(Upstream(p.name, p.tag, p.commit, p.package_root) for p in project.pins),
        rootfs=str(skel.rootfs_path(spec.rootfs, cache_dir())),
    )


def make_runtime(
    project: Project,
    platform: Platform,
    site_packages: str | None,
    *,
    force: bool = False,
    relock: bool = False,
    verbose: bool = False,
) -> RuntimeMade:
    """The runtime base for `platform` (the skeleton plus every wheel of its runtime lock), built when the engine
    lacks it; `relock`: resolve the pinned release's requirements again with uv first (network)."""
    from imgbuild.builder import runtime_base as rb
    from imgbuild.builder import runtime_lock as rl
    from imgbuild.upstream.requires import overrides_in_effect

    if relock:
        if project.pin_problems:
            raise UpstreamError(
                "the pins disagree, so the runtime lock cannot hold them all: " + "; ".join(project.pin_problems),
                hint="bump the required pin, or write an override with its reason under it in "
                "patches/upstream.yaml (docs/configuration.md)",
            )
        overrides = overrides_in_effect(project.pin_needs)
        rb.relock(project.root, platform, project.pin.version, overrides=overrides, verbose=verbose)
    rspec = bases.runtime_spec(project, site_packages_of(project, site_packages), platform)
    res = rb.ensure_runtime(Engine.connect(), rspec, cache_dir(), force=force, verbose=verbose)
    return RuntimeMade(
        tag=rspec.tag,
        image_id=res.info.id,
        platform=str(res.info.platform),
        site_packages=rspec.site_packages,
        lock=str(rl.LOCK_DIR / rl.lock_name(rspec.platform)),
        lock_digest=rspec.lock.digest(),
        wheels=len(rspec.lock.pins),
        upstreams=locked_rows(project, rspec.lock),
        built=res.built,
        image_bytes=res.info.size,
        seconds=round(res.seconds, 1),
    )


def make(
    project: Project,
    platform: str,
    site_packages: str | None,
    *,
    runtime: bool = False,
    force: bool = False,
    relock: bool = False,
    verbose: bool = False,
) -> SkeletonMade | RuntimeMade:
    """`imgbuild skeleton [--runtime]`: the skeleton, or with `runtime` the runtime base."""
    (parsed,) = Platform.parse_list(platform)
    if relock and not runtime:
        raise UsageError("--relock goes with --runtime", hint="imgbuild skeleton --runtime --relock --platform P")
    if runtime:
        return make_runtime(project, parsed, site_packages, force=force, relock=relock, verbose=verbose)
    return make_skeleton(project, parsed, site_packages, force=force, verbose=verbose)


def locked_rows(project: Project, lock: RuntimeLock) -> tuple[LockedUpstream, ...]:
    """Every pin (the first first) with the version the runtime lock has of its project."""
    out = []
    for p in project.pins:
        found = lock.pin(p.source.project if isinstance(p.source, WheelSource) else p.name)
        out.append(LockedUpstream(p.name, p.tag, p.commit, p.package_root, found.version if found else None))
    return tuple(out)
