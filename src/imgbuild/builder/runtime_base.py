"""The runtime base: a stand-in that can `import vllm`: a bookworm rootfs plus every wheel of the platform's
lock, pip-installed on the host (`--target --platform`, nothing under qemu); tagged by a digest of its inputs."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from imgbuild.atomic import write_text
from imgbuild.builder import runtime_lock as rl
from imgbuild.builder.skeleton import (
    BASE_EPOCH,
    PTH,
    SITE_PACKAGES,
    RootfsRecipe,
    base_dockerfile,
    ensure_rootfs,
    log,
    rootfs_into,
)
from imgbuild.digests import sha256_file
from imgbuild.engine import Engine, ImageInfo
from imgbuild.errors import StateError, UpstreamError
from imgbuild.platforms import Platform
from imgbuild.upstream import pip

REPOSITORY = "imgbuild-runtime"
FORMAT = "imgbuild-runtime/2"
LABEL = "imgbuild.runtime-base"
INCLUDE = ("python3", "libstdc++6", "procps")  # procps: a standalone `kill`, which sparkrun's health check runs
IMAGE_PYTHON = "/usr/bin/python3"
BIN = "usr/local/bin"
PIP_ENV = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@dataclass(frozen=True)
class RuntimeSpec:
    platform: str
    lock: rl.Lock
    site_packages: str = SITE_PACKAGES

    @property
    def arch(self) -> str:
        return self.platform.split("/")[1]

    @property
    def rootfs(self) -> RootfsRecipe:
        return RootfsRecipe(self.arch, include=INCLUDE)

    def key(self) -> str:
        parts = [FORMAT, self.platform, self.rootfs.key(), self.lock.digest(), self.site_packages]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.arch}-{self.key()[:12]}"


@dataclass(frozen=True)
class RuntimeResult:
    info: ImageInfo
    built: bool
    downloaded: int  # wheels fetched this run
    download_bytes: int  # bytes of every wheel in the lock
    seconds: float


# -- the wheel cache ---------------------------------------------------------
def wheel_dir(cache: Path) -> Path:
    return cache / "runtime" / "wheels"


def cached_wheel(cache: Path, pin: rl.Pin) -> Path | None:
    found = sorted((wheel_dir(cache) / pin.sha256).glob("*.whl"))
    return found[0] if found else None


@contextlib.contextmanager
def cache_lock(cache: Path) -> Iterator[None]:
    """One imgbuild at a time fills the runtime cache; staging a killed run left is removed under it."""
    base = cache / "runtime"
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateError(
                f"another imgbuild is building a runtime base in {base}", hint="wait for it to finish"
            ) from None
        for leftover in base.glob(".staging-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        yield
    finally:
        os.close(fd)


def _staging(cache: Path, what: str) -> tempfile.TemporaryDirectory[str]:
    """A staging directory in the runtime cache (so its files move in by rename), removed after."""
    return tempfile.TemporaryDirectory(prefix=f".staging-{what}-", dir=cache / "runtime", ignore_cleanup_errors=True)


def _pip(args: list[str], *, verbose: bool, what: str) -> None:
    proc = pip.run_logged(args, env=PIP_ENV, verbose=verbose)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout or "").strip().splitlines()[-15:])
        raise UpstreamError(f"pip {what} failed (exit {proc.returncode}):\n{tail}")


def _target_args(platform: str) -> list[str]:
    plats = [a for tag in rl.platform_tags(platform) for a in ("--platform", tag)]
    return [*plats, "--python-version", rl.PYTHON_VERSION, "--implementation", "cp", "--only-binary", ":all:"]


def fetch_wheels(lock: rl.Lock, cache: Path) -> int:
    """Download the lock's wheels missing from the cache; returns how many were fetched."""
    missing = [p for p in lock.pins if cached_wheel(cache, p) is None]
    if not missing:
        return 0
    log(f"downloading {len(missing)} of {len(lock.pins)} locked wheels for {lock.platform} (once; cached by sha256)")
    with _staging(cache, "download") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("".join(p.line() + "\n" for p in missing))
        out = Path(tmp) / "wheels"
        args = ["download", "--no-deps", "--require-hashes", "-d", str(out), "-r", str(req)]
        _pip([*args, *_target_args(lock.platform)], verbose=True, what=f"download for {lock.platform}")
        for path in sorted(out.iterdir()):  # pip checked each against the lock's hashes
            final = wheel_dir(cache) / sha256_file(path)
            final.mkdir(parents=True, exist_ok=True)
            os.replace(path, final / path.name)
    return len(missing)


# -- the installed tree -----------------------------------------------------
def fix_shebangs(bin_dir: Path, python: str = IMAGE_PYTHON) -> list[str]:
    """Point console scripts pip wrote for the host's python at the image's."""
    fixed = []
    for path in sorted(bin_dir.iterdir()) if bin_dir.is_dir() else []:
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        first, nl, rest = data.partition(b"\n")
        if first.startswith(b"#!") and b"python" in first:
            path.write_bytes(f"#!{python}".encode() + nl + rest)
            fixed.append(path.name)
    return fixed


def install_tree(lock: rl.Lock, cache: Path, target: Path, *, verbose: bool = False) -> None:
    """pip-install every locked wheel into `target` for the lock's platform (nothing is run from them)."""
    req = target.parent / "install.txt"
    lines = []
    for pin in lock.pins:
        wheel = cached_wheel(cache, pin)
        if wheel is None:
            raise UpstreamError(f"{pin.name}=={pin.version} is not in the wheel cache")
        lines.append(f"{wheel} --hash=sha256:{pin.sha256}\n")
    req.write_text("".join(lines))
    log(f"installing {len(lock.pins)} wheels for {lock.platform} on the host (pip --target; a few minutes)")
    args = ["install", "--no-index", "--no-deps", "--require-hashes", "--no-compile", "--no-warn-script-location"]
    args += ["--target", str(target), "-r", str(req)]
    _pip([*args, *_target_args(lock.platform)], verbose=verbose, what=f"install for {lock.platform}")
    fix_shebangs(target / "bin")


def pth_text(site_packages: str) -> bytes:
    """Makes site-packages a site directory, so the .pth files wheels put there are read too."""
    return f"import site; site.addsitedir({site_packages!r})\n".encode()


def labels_of(spec: RuntimeSpec) -> dict[str, str]:
    vllm = spec.lock.pin(rl.ROOT)
    return {
        LABEL: spec.key(),
        "imgbuild.runtime.lock": spec.lock.digest(),
        "imgbuild.site-packages": spec.site_packages,
        "imgbuild.runtime.vllm": vllm.version if vllm else "",
        "org.opencontainers.image.description": "imgbuild runtime base: stand-in that can import vllm",
    }


def build_context(target: Path, rootfs: Path, site_packages: str, labels: dict[str, str]) -> Path:
    """`target`'s folder as a build context: the tree (its console scripts moved to bin/), the rootfs, the
    .pth, the Dockerfile; every mtime 0, so that equal trees give equal layers."""
    context = target.parent
    if (target / "bin").is_dir():
        os.replace(target / "bin", context / "bin")
    else:
        (context / "bin").mkdir()
    (context / "site.pth").write_bytes(pth_text(site_packages))
    rootfs_into(context, rootfs)
    steps = ["ADD rootfs.tar /", f"COPY tree/ {site_packages.rstrip('/')}/", f"COPY bin/ /{BIN}/",
             f"COPY site.pth /{PTH}"]  # fmt: skip
    (context / "Dockerfile").write_text(base_dockerfile(labels, steps))
    for root, dirs, files in os.walk(context):
        for name in [*dirs, *files]:
            os.utime(os.path.join(root, name), (0, 0), follow_symlinks=False)
    return context


def ensure_runtime(
    engine: Engine, spec: RuntimeSpec, cache: Path, *, force: bool = False, verbose: bool = False
) -> RuntimeResult:
    """The runtime base for `spec`, built if the daemon lacks it."""
    start = time.monotonic()
    size = 0
    info = engine.image(spec.tag)
    if info is not None and info.labels.get(LABEL) == spec.key() and not force:
        return RuntimeResult(info, False, 0, size, time.monotonic() - start)
    with cache_lock(cache):
        fetched = fetch_wheels(spec.lock, cache)
        size = sum(w.stat().st_size for p in spec.lock.pins if (w := cached_wheel(cache, p)))
        rootfs = ensure_rootfs(spec.rootfs, cache, verbose=verbose)
        with _staging(cache, "build") as tmp:
            target = Path(tmp) / "tree"
            install_tree(spec.lock, cache, target, verbose=verbose)
            log(f"building {spec.tag} (BuildKit: the rootfs and the installed tree)")
            context = build_context(target, rootfs, spec.site_packages, labels_of(spec))
            platforms = [Platform.parse(spec.platform)]
            engine.build(
                context, tags=[spec.tag], platforms=platforms, epoch=BASE_EPOCH, compress=False, verbose=verbose
            )
    return RuntimeResult(engine.require(spec.tag), True, fetched, size, time.monotonic() - start)


# -- relocking ----------------------------------------------------------------
def relock(root: Path, platform: str, vllm_version: str, *, verbose: bool = False) -> rl.Lock:
    """Resolve vllm==VERSION for `platform` with pip (network) and write its lock file."""
    exclusions = rl.load_exclusions(root)
    with tempfile.TemporaryDirectory(prefix="imgbuild-relock-") as tmp:
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "--ignore-installed", "--use-feature=fast-deps", "--report", str(report)]
        args += ["--target", str(Path(tmp) / "t"), f"{rl.ROOT}=={vllm_version}"]
        log(f"resolving {rl.ROOT}=={vllm_version} for {platform} with pip (a few minutes)")
        _pip([*args, *_target_args(platform)], verbose=verbose, what=f"resolve for {platform}")
        lock = rl.lock_from_report(json.loads(report.read_text()), platform, exclusions)
    write_text(root / rl.LOCK_DIR / rl.lock_name(platform), lock.text())
    return lock
