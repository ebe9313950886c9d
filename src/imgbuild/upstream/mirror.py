"""The pinned upstream release in a bare git mirror in the user cache, one per source: a git source is fetched only
when its commit is missing; a wheel's text files are committed with a fixed author and date (an id of the wheel)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from imgbuild import offline
from imgbuild.atomic import write_json
from imgbuild.cache import cache_dir, ensure_cache_dir
from imgbuild.config.models import GitSource, UpstreamPin, WheelSource
from imgbuild.digests import sha256_file
from imgbuild.errors import ImgbuildError, UpstreamError, disk_full, no_space
from imgbuild.progress import to_stderr
from imgbuild.upstream import pip
from imgbuild.upstream.git import GitError, GitRepo, run_git

MATERIALIZE_DATE = "0 +0000"  # fixed, so equal wheels give equal commits
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
PROBLEMS = ("error", "fatal", "missing", "broken")  # how `git fsck` starts a line about a damaged object


class BrokenMirror(Exception):
    """The cache mirror is damaged (missing objects, broken refs or packs)."""


def source_key(source: GitSource | WheelSource) -> str:
    if isinstance(source, GitSource):
        identity = "git:" + source.url.rstrip("/").removesuffix(".git")
    else:
        identity = f"wheel:{source.project}:{source.platform}:{source.python_version}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PinCache:
    """A pin, with its cache mirror and whether the mirror has the pinned commit."""

    name: str
    tag: str
    commit: str
    kind: str
    package_root: str
    mirror: str
    pinned_commit_cached: bool


@dataclass(frozen=True)
class Resolved:
    repo: GitRepo
    commit: str
    tag: str


class Mirror:
    def __init__(self, source: GitSource | WheelSource, package_root: str, root: Path | None = None) -> None:
        self.source = source
        self.package_root = package_root
        self.root = root or cache_dir()
        self.path = self.root / "mirrors" / f"{source_key(source)}.git"
        self._repo: GitRepo | None = None  # the mirror, once opened: its one object reader serves every read
        self._whole: set[str] = set()  # objects of the opened mirror that `_check_whole` found whole

    # -- the mirror itself ----------------------------------------------
    def open(self) -> GitRepo:
        """Open the mirror, creating it atomically if needed."""
        if self.path.exists():
            try:
                repo = self._git_repo()
                if repo.repo.bare and repo.run("config", "--get", "imgbuild.source").strip() == source_key(self.source):
                    return repo
            except GitError:
                pass
            self.set_aside("it is not an imgbuild mirror")
        ensure_cache_dir(self.path.parent)
        try:
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.path.parent))
        except OSError as exc:
            raise (
                disk_full(f"cannot create the cache mirror {self.path}", self.root) if no_space(exc) else exc
            ) from exc
        try:
            repo = GitRepo.init_bare(staging)
            repo.run("config", "imgbuild.source", source_key(self.source))
        except Exception as exc:  # gitpython's or git's: a half-made staging repository is never used
            shutil.rmtree(staging, ignore_errors=True)
            if no_space(exc):
                raise disk_full(f"cannot create the cache mirror {self.path}", self.root) from exc
            raise
        try:
            os.rename(staging, self.path)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process won the race
        return self._git_repo()

    def _git_repo(self) -> GitRepo:
        if self._repo is None:
            self._repo = GitRepo(self.path)
        return self._repo

    def set_aside(self, why: str) -> Path:
        aside = Path(f"{self.path}.broken-{int(time.time())}-{os.getpid()}")
        to_stderr(f"imgbuild: cache mirror {self.path} is broken ({why}); set aside as {aside.name}, rebuilding it")
        shutil.move(str(self.path), aside)
        self._repo = None
        self._whole.clear()
        return aside

    def resolve_pin(self, pin: UpstreamPin) -> Resolved:
        """The pinned commit, present and whole in the mirror, checked against the tag and the wheel's sha256; a
        damaged mirror is set aside and rebuilt (from the cached wheel, or by fetching again)."""
        try:
            if self.path.exists():
                self._check_tag(pin.tag)
            resolved = self._resolve_pin(pin)
        except ImgbuildError:
            raise
        except Exception as exc:
            if no_space(exc) or not self.path.exists():  # a full disk breaks nothing already there: keep it
                if no_space(exc):
                    raise disk_full(f"cannot update the cache mirror {self.path}", self.root) from exc
                raise
            aside = self.set_aside(_one_line(exc))
            try:
                resolved = self._resolve_pin(pin)
            except UpstreamError as again:
                raise UpstreamError(
                    f"the cache mirror {self.path} was broken ({_one_line(exc)}; set aside as {aside}), and "
                    f"rebuilding it failed: {again.message}",
                    hint=f"bring the network or the wheel back (cache: {self.root}), then run the command again",
                ) from again
            except Exception as still:  # as above: a damaged repository fails in gitpython's many ways
                raise UpstreamError(
                    f"the cache mirror {self.path} is broken and rebuilding it failed: {_one_line(still)}",
                    hint=f"remove {self.path} and run again (cache: {self.root})",
                ) from still
        return resolved

    def _resolve_pin(self, pin: UpstreamPin) -> Resolved:
        resolved = self.resolve(pin.tag)
        self._check_whole(resolved.repo, resolved.commit)
        if isinstance(self.source, WheelSource):
            self._check_wheel_digest(resolved.repo, resolved.tag)
        if resolved.commit != pin.commit:
            raise UpstreamError(
                f"tag {pin.tag} resolves to {resolved.commit}, but patches/upstream.yaml pins {pin.commit}",
                hint="the tag moved upstream or the pin is wrong; check the release and fix `commit:` deliberately",
            )
        return resolved

    def _check_tag(self, tag: str) -> None:
        """A tag the mirror has must point at a readable commit (a broken ref or pack is not 'missing')."""
        ref = f"refs/tags/v{tag.removeprefix('v')}" if isinstance(self.source, WheelSource) else f"refs/tags/{tag}"
        done = run_git(["for-each-ref", "--format=%(objectname)", ref], cwd=self.path)
        err = done.stderr.decode(errors="replace").strip()
        if done.returncode != 0 or err:  # a ref that cannot be read is broken, not missing
            raise BrokenMirror((err or f"git for-each-ref exited {done.returncode}").splitlines()[0])
        sha = done.stdout.decode().strip()
        if sha:
            repo = self._git_repo()
            commit = repo.resolve_commit(sha)  # (an annotated tag's object, peeled)
            if commit is None:
                raise BrokenMirror(f"{ref} points at {sha}, which cannot be read")
            self._check_whole(repo, sha)
            self._whole.add(commit)  # reached from `sha`: `_resolve_pin` need not check it again

    def _check_whole(self, repo: GitRepo, commit: str) -> None:
        """Every object of `commit` is there and readable (a few ms for a release tree); once per object and
        opened mirror."""
        if commit in self._whole and repo is self._repo:
            return
        done = run_git(["fsck", "--connectivity-only", "--no-dangling", "--no-progress", commit], cwd=repo.path)
        bad = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.startswith(PROBLEMS)]
        if done.returncode != 0 or bad:
            raise BrokenMirror(bad[0] if bad else f"git fsck exited {done.returncode}")
        if repo is self._repo:
            self._whole.add(commit)

    def _check_wheel_digest(self, repo: GitRepo, tag: str) -> None:
        """The cached release must come from the wheel the pin names (its sha256)."""
        assert isinstance(self.source, WheelSource)
        if tag.removeprefix("v") != self.source.version:
            return
        recorded = repo.run("config", "--default", "", "--get", f"imgbuild.{tag}.sha256").strip()
        if not recorded:  # _materialize records it: the commit was not made here
            raise BrokenMirror(f"no wheel sha256 is recorded for {tag}")
        if recorded != self.source.sha256:
            raise UpstreamError(
                f"patches/upstream.yaml pins sha256 {self.source.sha256} for {self.source.filename}, but the cached "
                f"release {tag} in {self.path} was made from a wheel with sha256 {recorded}",
                hint="if the new sha256 is right, remove the mirror and the cached wheel so both are made again; "
                "otherwise restore the pin's sha256",
            )

    def resolve(self, ref: str) -> Resolved:
        """A tag, a commit or a release version, fetched or materialized if missing."""
        repo = self.open()
        if isinstance(self.source, WheelSource):
            version = ref.removeprefix("v")
            tag = f"v{version}"
            commit = repo.resolve_commit(f"refs/tags/{tag}")
            if commit is None:
                commit = self._materialize(repo, version)
            return Resolved(repo, commit, tag)
        commit = repo.resolve_commit(f"refs/tags/{ref}") or repo.resolve_commit(ref)
        if commit is None:
            self._fetch(repo, ref)
            commit = repo.resolve_commit(f"refs/tags/{ref}") or repo.resolve_commit(ref)
        if commit is None:
            raise UpstreamError(
                f"{ref!r} is not a tag or commit of {self.source.url}", hint="check the spelling of the ref"
            )
        return Resolved(repo, commit, ref)

    # -- git sources ------------------------------------------------------
    def _fetch(self, repo: GitRepo, ref: str) -> None:
        assert isinstance(self.source, GitSource)
        url = self.source.url
        offline.refuse(
            f"{ref} of {url} is not in the cache mirror {self.path}",
            "run the same `imgbuild build` without --offline (it fetches the pinned release into the cache)",
        )
        to_stderr(f"imgbuild: fetching {ref} from {url}")
        refspecs = [ref] if SHA_RE.match(ref) else [f"+refs/tags/{ref}:refs/tags/{ref}"]
        try:
            repo.run("fetch", "--no-tags", url, *refspecs)
        except GitError as first:
            if no_space(first):  # git keeps a fetch it could not finish out of its refs: the mirror stays whole
                raise disk_full(f"cannot fetch {ref!r} into the cache mirror {self.path}", self.root) from first
            try:  # maybe a branch, or a server that refuses fetching by sha
                repo.run("fetch", "--tags", url)
            except GitError:
                raise UpstreamError(
                    f"cannot fetch {ref!r} from {url}: {first}",
                    hint="check the network or the URL; once a release is cached, imgbuild works offline",
                ) from first

    # -- wheel sources ----------------------------------------------------
    def wheel_path(self, version: str) -> Path:
        assert isinstance(self.source, WheelSource)
        src = self.source
        if src.url and version == src.version:
            parsed = urlparse(src.url)
            return Path(parsed.path if parsed.scheme == "file" else src.url)
        wheels = self.root / "wheels"
        if version == src.version:
            return wheels / src.filename
        stem = re.sub(r"[-_.]+", "_", src.project)  # a wheel's file name spells flashinfer-python so
        found = sorted(
            w
            for pattern in {f"{src.project}-{version}-*.whl", f"{stem}-{version}-*.whl"}
            for w in wheels.glob(pattern)
            if src.platform in w.name or w.name.endswith("-any.whl")
        )
        return found[0] if found else wheels / f"{src.project}-{version}-MISSING.whl"

    def fetch_wheel(self, version: str) -> Path:
        assert isinstance(self.source, WheelSource)
        src = self.source
        path = self.wheel_path(version)
        if not path.exists():
            offline.refuse(
                f"the {src.project}=={version} wheel ({src.platform}) is not in the cache ({path.parent})",
                "run the same `imgbuild build` without --offline (it downloads the wheel into the cache)",
            )
            dest = ensure_cache_dir(self.root / "wheels")
            to_stderr(f"imgbuild: downloading {src.project}=={version} ({src.platform}) with pip")
            args = [
                "download", f"{src.project}=={version}", "--no-deps",
                "--only-binary", ":all:", "--platform", src.platform, "--python-version", src.python_version,
                "--implementation", "cp", "--progress-bar", "off", "-d", str(dest),
            ]  # fmt: skip
            proc = pip.run(args)
            if proc.returncode != 0:
                raise UpstreamError(
                    f"cannot download {src.project}=={version} for {src.platform}: {proc.stderr.strip()[-400:]}",
                    hint="check the package index is reachable, or set source.url to a local wheel",
                )
            path = self.wheel_path(version)
            if not path.exists():
                raise UpstreamError(f"pip downloaded no wheel named like {path.name} into {dest}")
        if version == src.version and self._stamp(path).get("sha256") != src.sha256:
            digest = sha256_file(path)
            if digest != src.sha256:
                raise UpstreamError(
                    f"{path}: sha256 {digest} does not match the pinned {src.sha256}",
                    hint="delete the file so it is downloaded again, or fix the pin deliberately",
                )
            self._restamp(path, sha256=digest)
        return path

    def requires(self, version: str) -> tuple[str, ...]:
        """The release's own requirements: `Requires-Dist` of its wheel (fetched once into the cache)."""
        path = self.fetch_wheel(version)
        kept = self._stamp(path).get("requires")
        if isinstance(kept, list):
            return tuple(str(r) for r in kept)
        found = wheel_requires(path)
        self._restamp(path, requires=list(found))
        return found

    # A wheel in the cache is hashed (hundreds of MB: 0.7 s for vLLM's) and its zip directory read (0.5 s) once,
    # not at every `plan`: what they gave is kept beside it, valid while the file's size, mtime and inode are
    # those it had (as git's index trusts a file's stat). A wheel outside the cache (`source.url`) gets no stamp.
    def _stamp_path(self, wheel: Path) -> Path | None:
        return wheel.with_name(wheel.name + ".checked.json") if wheel.parent == self.root / "wheels" else None

    def _stamp(self, wheel: Path) -> dict[str, object]:
        stamp = self._stamp_path(wheel)
        try:
            kept = json.loads(stamp.read_text()) if stamp else {}
            st = wheel.stat()
        except (OSError, ValueError):
            return {}
        ok = isinstance(kept, dict) and kept.get("stat") == [st.st_size, st.st_mtime_ns, st.st_ino]
        return kept if ok else {}

    def _restamp(self, wheel: Path, **facts: object) -> None:
        stamp = self._stamp_path(wheel)
        if stamp is None:
            return
        st = wheel.stat()
        with contextlib.suppress(OSError):  # a read-only cache: checked again next time
            write_json(stamp, {**self._stamp(wheel), **facts, "stat": [st.st_size, st.st_mtime_ns, st.st_ino]})

    def _materialize(self, repo: GitRepo, version: str) -> str:
        wheel = self.fetch_wheel(version)
        to_stderr(f"imgbuild: committing {self.package_root}/ of {wheel.name} into the cache")
        commit = materialize_wheel(repo, wheel, self.package_root, f"refs/tags/v{version}", version)
        assert isinstance(self.source, WheelSource)
        pinned = version == self.source.version  # fetch_wheel has just checked its sha256: no second pass
        repo.run("config", f"imgbuild.v{version}.sha256", self.source.sha256 if pinned else sha256_file(wheel))
        return commit


FIRST_BLOCK = 1 << 16  # enough to see the NUL bytes of an ELF header, and most text files whole


def _text_member(zf: zipfile.ZipFile, name: str) -> bytes | None:
    """The member's bytes, or None for a binary (any NUL byte). Binaries are recognised from their first
    block, so the compiled extensions (hundreds of MB) are never inflated whole only to be left out."""
    with zf.open(name) as member:
        data = member.read(FIRST_BLOCK)
        if b"\0" in data:
            return None
        rest = member.read()
    return None if b"\0" in rest else data + rest


def wheel_requires(wheel: Path) -> tuple[str, ...]:
    """`Requires-Dist` of a wheel's `*.dist-info/METADATA` (none when it has no METADATA, as no real wheel does)."""
    from imgbuild.upstream.requires import metadata_requires

    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            return metadata_requires(zf.read(names[0])) if names else ()
    except (OSError, zipfile.BadZipFile) as exc:
        raise UpstreamError(
            f"cannot read the metadata of {wheel}: {exc}", hint="delete the file so it is fetched again"
        ) from exc


def materialize_wheel(repo: GitRepo, wheel: Path, package_root: str, ref: str, version: str) -> str:
    """Commit the text files of `package_root/` in `wheel` to `ref` with one `git fast-import`; return the commit."""
    stream = io.BytesIO()
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith(package_root + "/") and not n.endswith("/"))
        marks: list[tuple[str, int]] = []
        for mark, name in enumerate(names, start=1):
            data = _text_member(zf, name)
            if data is not None:  # compiled extensions and other binaries stay out
                stream.write(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(data), data))
                marks.append((name, mark))
    message = f"{package_root} {version} from {wheel.name}\n".encode()
    who = f"imgbuild <imgbuild@localhost> {MATERIALIZE_DATE}".encode()
    stream.write(b"commit %s\nauthor %s\ncommitter %s\ndata %d\n%s" % (ref.encode(), who, who, len(message), message))
    stream.write(b"".join(b"M 100644 :%d %s\n" % (mark, name.encode()) for name, mark in marks) + b"\n")
    # No deltas (fast-import only tries the previous blob, another file) and light zlib: faster, a little larger.
    args = ["-c", "pack.compression=1", "fast-import", "--quiet", "--force", "--date-format=raw", "--depth=0"]
    done = run_git(args, stdin=stream.getvalue(), cwd=repo.path)
    if done.returncode != 0:
        raise BrokenMirror(
            f"committing {wheel.name}: git fast-import failed: {done.stderr.decode(errors='replace')[-400:]}"
        )
    commit = repo.resolve_commit(ref)
    if commit is None:
        raise BrokenMirror(f"committing {wheel.name} produced no {ref}")
    return commit


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def open_pinned(pin: UpstreamPin) -> Resolved:
    return Mirror(pin.source, pin.package_root).resolve_pin(pin)
