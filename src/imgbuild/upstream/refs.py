"""What a user types after --onto: a tag, a commit, a release version, `pinned` (the pin in patches/upstream.yaml)
or `latest` (the newest release), resolved through the cache mirror."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from imgbuild.config.models import GitSource, UpstreamPin, WheelSource
from imgbuild.digests import sha256_file
from imgbuild.errors import UpstreamError
from imgbuild.upstream import pip
from imgbuild.upstream.git import GitError, GitRepo, ls_remote_tags
from imgbuild.upstream.mirror import SHA_RE, Mirror, Resolved

RELEASE_RE = re.compile(r"^v?(\d+(?:\.\d+)*)$")


def release_key(tag: str) -> tuple[int, ...] | None:
    m = RELEASE_RE.match(tag)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def newest(tags: list[str]) -> str | None:
    return max((t for t in tags if release_key(t) is not None), key=lambda t: release_key(t) or (), default=None)


def newest_release(versions: list[str]) -> str | None:
    """The newest final release among a wheel's versions (PEP 440: 0.7.2.post1 counts, 0.8.0rc1 does not)."""
    final = []
    for v in versions:
        try:
            parsed = Version(v)
        except InvalidVersion:
            continue
        if not parsed.is_prerelease and not parsed.is_devrelease:
            final.append((parsed, v))
    return max(final)[1] if final else None


def latest_release(pin: UpstreamPin) -> str:
    """The newest final release of the upstream (asks the network)."""
    source = pin.source
    if isinstance(source, GitSource):
        try:
            tag = newest(ls_remote_tags(source.url))
        except GitError as exc:
            raise UpstreamError(
                f"cannot list the tags of {source.url}: {exc}", hint="check the network or the URL"
            ) from exc
        if tag is None:
            raise UpstreamError(f"{source.url} has no release tags (like v1.2.3)")
        return tag
    version = newest_release(index_versions(source))
    if version is None:
        raise UpstreamError(f"the package index lists no final release of {source.project}")
    return version


def index_versions(source: WheelSource) -> list[str]:
    """Every version of the wheel's project the package index has for its platform and Python, newest first
    (`pip index versions`, through the pip funnel; asks the network)."""
    args = ["index", "versions", source.project, "--platform", source.platform,
            "--python-version", source.python_version, "--only-binary", ":all:"]  # fmt: skip
    proc = pip.run(args)
    m = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if proc.returncode != 0 or not m:
        raise UpstreamError(
            f"cannot ask the package index for the versions of {source.project}: {proc.stderr.strip()[-300:]}",
            hint="check that the package index is reachable, or pass a version to --onto",
        )
    return [v.strip() for v in m.group(1).split(",") if v.strip()]


def is_version(ref: str) -> bool:
    """A release version as a wheel names it (PEP 440: 0.34.0, v0.34.0, 0.7.2.post1), not a commit id."""
    if RELEASE_RE.match(ref):
        return True
    try:
        Version(ref.removeprefix("v"))
    except InvalidVersion:
        return False
    return not SHA_RE.match(ref)


def resolve_ref(pin: UpstreamPin, ref: str) -> Resolved:
    """A tag, commit, release version, `pinned` or `latest`, present in the cache mirror."""
    ref = ref.strip()
    if not ref:
        raise UpstreamError("empty ref", hint="pass a tag, a commit or a release version")
    mirror = Mirror(pin.source, pin.package_root)
    if ref == "pinned":
        return mirror.resolve_pin(pin)
    if ref == "latest":
        ref = latest_release(pin)
    if isinstance(pin.source, WheelSource) and SHA_RE.match(ref) and not is_version(ref):
        repo = mirror.open()
        commit = repo.resolve_commit(ref)
        if commit is None:
            raise UpstreamError(
                f"commit {ref} is not in the cache, and a wheel source cannot fetch commits",
                hint="pass the release version instead (for example 0.33.0)",
            )
        return Resolved(repo, commit, _tag_for(repo, commit) or commit)
    if isinstance(pin.source, WheelSource) and not is_version(ref):
        raise UpstreamError(
            f"{ref!r} is not a release version; this upstream comes from {pin.source.project} wheels",
            hint="pass a version like 0.33.0 or v0.33.0",
        )
    try:
        resolved = _resolve_git(mirror, ref) if isinstance(pin.source, GitSource) else mirror.resolve(ref)
    except GitError as exc:
        raise UpstreamError(str(exc)) from exc
    if resolved.tag == ref and SHA_RE.match(ref):
        tag = _tag_for(resolved.repo, resolved.commit)
        if tag:
            return Resolved(resolved.repo, resolved.commit, tag)
    return resolved


def _resolve_git(mirror: Mirror, ref: str) -> Resolved:
    """A release version (0.33.0) is the tag v0.33.0 of a git source; a tag spelled as given wins."""
    if not RELEASE_RE.match(ref) or ref.startswith("v"):
        return mirror.resolve(ref)
    try:
        return mirror.resolve(f"v{ref}")
    except UpstreamError as first:
        try:
            return mirror.resolve(ref)
        except UpstreamError:
            raise UpstreamError(
                f"neither v{ref} nor {ref} is a tag of {mirror.source.url}",
                hint="check the release version, or pass the tag or commit itself",
            ) from first


def _tag_for(repo: GitRepo, commit: str) -> str | None:
    tags = repo.run("tag", "--points-at", commit).split()
    return newest(tags) or (sorted(tags)[0] if tags else None)


def wheel_pin_fields(pin: UpstreamPin, tag: str) -> dict[str, str | None]:
    """The `source:` fields of a wheel pin that move with the release (empty for git)."""
    source = pin.source
    if not isinstance(source, WheelSource):
        return {}
    version = tag.removeprefix("v")
    if version == source.version:
        return {}
    mirror = Mirror(source, pin.package_root)
    wheel: Path = mirror.fetch_wheel(version)
    fields: dict[str, str | None] = {
        "version": version,
        "filename": wheel.name,
        "sha256": sha256_file(wheel),
    }
    if source.url is not None:
        fields["url"] = None  # it named the old release's wheel
    return fields
