"""An offline stand-in for the stock vLLM base: a Debian rootfs with python3 plus the pinned release's `.py` tree,
no torch (smoke.skeleton_commands stand in); tagged by a digest of every input."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imgbuild import offline, proc
from imgbuild.engine import Engine, ImageInfo, check_binfmt
from imgbuild.errors import DockerError
from imgbuild.plan.dockerfile import quote, tar_files
from imgbuild.plan.labels import SKELETON
from imgbuild.platforms import Platform
from imgbuild.upstream.git import GitRepo

REPOSITORY = "imgbuild-skeleton"
FORMAT = "imgbuild-skeleton/1"
SITE_PACKAGES = "/usr/local/lib/python3.12/dist-packages"
PTH = "usr/lib/python3/dist-packages/imgbuild-skeleton-vllm.pth"
ENTRYPOINT = ("vllm", "serve")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SOURCES_CANDIDATES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
MMDEBSTRAP_HINT = "apt-get install mmdebstrap arch-test qemu-user-static binfmt-support (or run .ci/setup-host.sh)"


def host_sources() -> Path | None:
    """The apt sources file to give mmdebstrap as its mirror (IMGBUILD_DEBIAN_SOURCES overrides)."""
    if os.environ.get("IMGBUILD_DEBIAN_SOURCES"):
        return Path(os.environ["IMGBUILD_DEBIAN_SOURCES"])
    for path in SOURCES_CANDIDATES:
        try:
            text = path.read_text()
        except OSError:
            continue
        if any(line.strip().startswith(("deb ", "Types:")) for line in text.splitlines()):
            return path
    return None


@dataclass(frozen=True)
class RootfsRecipe:
    arch: str
    suite: str = "bookworm"
    variant: str = "essential"
    include: tuple[str, ...] = ("python3-minimal", "procps")  # procps: /bin/kill, which sparkrun's health check runs
    sources: Path | None = field(default_factory=host_sources)

    def key(self) -> str:
        sources = hashlib.sha256(self.sources.read_bytes() if self.sources and self.sources.is_file() else b"")
        parts = [FORMAT, self.arch, self.suite, self.variant, ",".join(self.include), sources.hexdigest()]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def command(self, out: Path) -> list[str]:
        cmd = ["mmdebstrap", f"--arch={self.arch}", f"--variant={self.variant}"]
        cmd += [f"--include={','.join(self.include)}", self.suite, str(out)]
        return cmd + ([str(self.sources)] if self.sources else [])


@dataclass(frozen=True)
class SkeletonSpec:
    platform: Platform
    upstream_commit: str
    package_root: str = "vllm"
    site_packages: str = SITE_PACKAGES
    more: tuple[tuple[str, str], ...] = ()  # the further pins' (commit, package root), in the pins' order

    @property
    def arch(self) -> str:
        return self.platform.arch

    @property
    def rootfs(self) -> RootfsRecipe:
        return RootfsRecipe(self.arch)

    def key(self) -> str:
        parts = [
            FORMAT,
            str(self.platform),
            self.rootfs.key(),
            self.upstream_commit,
            self.package_root,
            self.site_packages,
        ]
        parts += [f"{commit} {root}" for commit, root in self.more]  # none with one pin: the key is as it was
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.arch}-{self.key()[:12]}"


def log(msg: str) -> None:
    print(f"imgbuild: {msg}", file=sys.stderr, flush=True)


def rootfs_path(recipe: RootfsRecipe, cache: Path) -> Path:
    return cache / "skeleton" / f"rootfs-{recipe.suite}-{recipe.arch}-{recipe.key()[:16]}.tar"


def ensure_rootfs(recipe: RootfsRecipe, cache: Path, *, verbose: bool = False) -> Path:
    """The cached rootfs tar, made with mmdebstrap into a staging file when missing."""
    out = rootfs_path(recipe, cache)
    if out.is_file():
        return out
    offline.refuse(
        f"the skeleton's {recipe.suite} {recipe.arch} rootfs is not in the cache ({out})",
        "`imgbuild skeleton` (mmdebstrap fetches Debian packages once; the rootfs is cached)",
    )
    if shutil.which("mmdebstrap") is None:
        raise DockerError("mmdebstrap is not installed; it makes the skeleton's rootfs", hint=MMDEBSTRAP_HINT)
    check_binfmt(Platform("linux", recipe.arch), Platform.host())
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tar", dir=out.parent)
    os.close(fd)
    staging = Path(tmp)
    cmd = recipe.command(staging)
    log(f"making the {recipe.suite} {recipe.arch} rootfs with mmdebstrap (about a minute, once; cached as {out})")
    try:
        done = proc.run(cmd, capture=not verbose, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or "").strip().splitlines()[-15:])
            raise DockerError(f"mmdebstrap failed (exit {done.returncode}):\n{tail}", hint=MMDEBSTRAP_HINT)
        os.replace(staging, out)
    finally:
        staging.unlink(missing_ok=True)
    return out


def packages_layer(trees: Sequence[tuple[GitRepo, str, str]], site_packages: str) -> bytes:
    """A layer tar: the .py files of each pin's (repo, commit, package root) tree under site-packages,
    plus the .pth."""
    site = site_packages.strip("/")
    files: dict[str, bytes] = {}
    for repo, commit, package_root in trees:
        archive = repo.archive(commit, package_root)
        before = len(files)
        with tarfile.open(fileobj=io.BytesIO(archive)) as src:
            for member in src.getmembers():
                if member.isfile() and member.name.endswith(".py"):
                    fh = src.extractfile(member)
                    if fh is not None:
                        files[f"{site}/{member.name}"] = fh.read()
        if len(files) == before:
            raise DockerError(f"the pinned commit {commit} has no .py files under {package_root}/")
    files[PTH] = f"{site_packages}\n".encode()
    return tar_files(files, 0)


def base_dockerfile(labels: dict[str, str], steps: list[str], source: str = "scratch") -> str:
    """A stand-in base (skeleton or runtime): `steps` (ADD/COPY) from `source`, PATH, labels, the stock ENTRYPOINT."""
    label_line = "LABEL " + " ".join(f"{k}={quote(v)}" for k, v in sorted(labels.items()))
    entry = json.dumps(list(ENTRYPOINT))
    return "\n".join([f"FROM {source}", *steps, f"ENV {PATH_ENV}", label_line, f"ENTRYPOINT {entry}", ""])


def rootfs_into(context: Path, rootfs: Path) -> None:
    """The cached rootfs tar into a build context as `rootfs.tar`: a hard link where it can be, else a copy."""
    try:
        os.link(rootfs, context / "rootfs.tar")
    except OSError:
        shutil.copyfile(rootfs, context / "rootfs.tar")


BASE_EPOCH = 0  # the stand-ins' config dates: fixed, as the stock image's do not matter here


def ensure_skeleton(
    engine: Engine,
    spec: SkeletonSpec,
    repos: Sequence[GitRepo],
    cache: Path,
    *,
    force: bool = False,
    verbose: bool = False,
) -> ImageInfo:
    """The skeleton image for `spec`, built if the daemon lacks it; `repos`: each pin's mirror, in the pins' order."""
    info = engine.image(spec.tag)
    if info is not None and info.labels.get(SKELETON) == spec.key() and not force:
        return info
    rootfs = ensure_rootfs(spec.rootfs, cache, verbose=verbose)
    pins = [(spec.upstream_commit, spec.package_root), *spec.more]
    log(f"building {spec.tag} (rootfs + {', '.join(f'{root}/ of {commit[:12]}' for commit, root in pins)})")
    labels = {
        SKELETON: spec.key(),
        "imgbuild.site-packages": spec.site_packages,
        "imgbuild.upstream.commit": spec.upstream_commit,
        "org.opencontainers.image.description": "imgbuild skeleton: offline stand-in for the stock vLLM image",
    }
    with tempfile.TemporaryDirectory(prefix=".context-", dir=rootfs.parent) as tmp:  # beside it: a hard link
        context = Path(tmp)
        rootfs_into(context, rootfs)
        trees = [(repo, commit, root) for repo, (commit, root) in zip(repos, pins, strict=True)]
        (context / "vllm.tar").write_bytes(packages_layer(trees, spec.site_packages))
        (context / "Dockerfile").write_text(base_dockerfile(labels, ["ADD rootfs.tar /", "ADD vllm.tar /"]))
        engine.build(
            context, tags=[spec.tag], platforms=[spec.platform], epoch=BASE_EPOCH, compress=False, verbose=verbose
        )
    return engine.require(spec.tag)
