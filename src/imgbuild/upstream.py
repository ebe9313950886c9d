"""The pinned upstream release, kept in a bare git mirror in the user cache.

One mirror per source, keyed by a hash of the source's identity, created
atomically through a staging directory and checked before use. Two kinds of
source feed it:

- `git`: a repository URL (https, file:// or a local path). Fetched only when
  the pinned commit is missing, so it works offline once cached.
- `wheel`: a release wheel from the package index. Its `<package_root>/` tree
  (text files only; compiled extensions are left out) is committed with a
  fixed author, date and message, so the commit id depends on the wheel alone.
  The rest of the engine sees an ordinary commit either way.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from imgbuild.config import GitSource, UpstreamPin, WheelSource
from imgbuild.digests import sha256_file
from imgbuild.errors import UpstreamError
from imgbuild.gitio import GitError, GitRepo

MATERIALIZE_DATE = "0 +0000"  # fixed, so equal wheels give equal commits


def cache_dir() -> Path:
    if os.environ.get("IMGBUILD_CACHE"):
        return Path(os.environ["IMGBUILD_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "imgbuild"


def source_key(source: GitSource | WheelSource) -> str:
    if isinstance(source, GitSource):
        identity = "git:" + source.url.rstrip("/").removesuffix(".git")
    else:
        identity = f"wheel:{source.project}:{source.platform}:{source.python_version}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Resolved:
    repo: GitRepo
    commit: str
    tag: str


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


class Mirror:
    def __init__(self, source: GitSource | WheelSource, package_root: str, root: Path | None = None) -> None:
        self.source = source
        self.package_root = package_root
        self.root = root or cache_dir()
        self.path = self.root / "mirrors" / f"{source_key(source)}.git"

    # -- the mirror itself ----------------------------------------------
    def open(self) -> GitRepo:
        """Open the mirror, creating it atomically if needed."""
        if self.path.exists():
            try:
                repo = GitRepo(self.path)
                if repo.repo.bare and repo.run("config", "--get", "imgbuild.source").strip() == source_key(self.source):
                    return repo
            except GitError:
                pass
            _log(f"imgbuild: cache mirror {self.path} is not valid; setting it aside and recreating it")
            shutil.move(str(self.path), f"{self.path}.broken-{os.getpid()}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.path.parent))
        repo = GitRepo.init_bare(staging)
        repo.run("config", "imgbuild.source", source_key(self.source))
        try:
            os.rename(staging, self.path)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process won the race
        return GitRepo(self.path)

    def resolve_pin(self, pin: UpstreamPin) -> Resolved:
        """The pinned commit, present in the mirror, and checked against the tag."""
        resolved = self.resolve(pin.tag)
        if resolved.commit != pin.commit:
            raise UpstreamError(
                f"tag {pin.tag} resolves to {resolved.commit}, but patches/upstream.yaml pins {pin.commit}",
                hint="the tag moved upstream or the pin is wrong; check the release and fix `commit:` deliberately",
            )
        return resolved

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
        _log(f"imgbuild: fetching {ref} from {url}")
        refspecs = [f"+refs/tags/{ref}:refs/tags/{ref}"] if not _looks_like_sha(ref) else [ref]
        try:
            repo.run("fetch", "--no-tags", url, *refspecs)
        except GitError as first:
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
        found = sorted(wheels.glob(f"{src.project}-{version}-*{src.platform}*.whl"))
        return found[0] if found else wheels / f"{src.project}-{version}-MISSING.whl"

    def fetch_wheel(self, version: str) -> Path:
        assert isinstance(self.source, WheelSource)
        src = self.source
        path = self.wheel_path(version)
        if not path.exists():
            dest = self.root / "wheels"
            dest.mkdir(parents=True, exist_ok=True)
            _log(f"imgbuild: downloading {src.project}=={version} ({src.platform}) with pip")
            cmd = [
                sys.executable, "-m", "pip", "download", f"{src.project}=={version}", "--no-deps",
                "--only-binary", ":all:", "--platform", src.platform, "--python-version", src.python_version,
                "--implementation", "cp", "--progress-bar", "off", "-d", str(dest),
            ]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise UpstreamError(
                    f"cannot download {src.project}=={version} for {src.platform}: {proc.stderr.strip()[-400:]}",
                    hint="check the package index is reachable, or set source.url to a local wheel",
                )
            path = self.wheel_path(version)
            if not path.exists():
                raise UpstreamError(f"pip downloaded no wheel named like {path.name} into {dest}")
        if version == src.version:
            digest = sha256_file(path)
            if digest != src.sha256:
                raise UpstreamError(
                    f"{path}: sha256 {digest} does not match the pinned {src.sha256}",
                    hint="delete the file so it is downloaded again, or fix the pin deliberately",
                )
        return path

    def _materialize(self, repo: GitRepo, version: str) -> str:
        wheel = self.fetch_wheel(version)
        _log(f"imgbuild: committing {self.package_root}/ of {wheel.name} into the cache")
        return materialize_wheel(repo, wheel, self.package_root, f"refs/tags/v{version}", version)


def _looks_like_sha(ref: str) -> bool:
    return len(ref) >= 7 and all(c in "0123456789abcdef" for c in ref)


def materialize_wheel(repo: GitRepo, wheel: Path, package_root: str, ref: str, version: str) -> str:
    """Commit the text files of `package_root/` in `wheel` to `ref`; return the commit."""
    prefix = package_root + "/"
    with tempfile.TemporaryFile() as stream, zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith(prefix) and not n.endswith("/"))
        marks: list[tuple[str, int]] = []
        for mark, name in enumerate(names, start=1):
            data = zf.read(name)
            if b"\0" in data:
                continue  # compiled extensions and other binaries stay out
            stream.write(b"blob\nmark :%d\ndata %d\n" % (mark, len(data)) + data + b"\n")
            marks.append((name, mark))
        message = f"{package_root} {version} from {wheel.name}\n".encode()
        who = f"imgbuild <imgbuild@localhost> {MATERIALIZE_DATE}".encode()
        stream.write(b"commit " + ref.encode() + b"\n" + b"author " + who + b"\ncommitter " + who + b"\n")
        stream.write(b"data %d\n" % len(message) + message)
        for name, mark in marks:
            stream.write(b"M 100644 :%d %s\n" % (mark, name.encode()))
        stream.write(b"\n")
        stream.seek(0)
        proc = subprocess.run(
            ["git", "fast-import", "--quiet", "--force", "--date-format=raw"],
            cwd=repo.path, stdin=stream, capture_output=True, check=False,
        )  # fmt: skip
    if proc.returncode != 0:
        raise UpstreamError(f"git fast-import failed for {wheel.name}: {proc.stderr.decode(errors='replace')[-400:]}")
    commit = repo.resolve_commit(ref)
    if commit is None:
        raise UpstreamError(f"materializing {wheel.name} produced no {ref}")
    return commit


def open_pinned(pin: UpstreamPin) -> Resolved:
    return Mirror(pin.source, pin.package_root).resolve_pin(pin)
