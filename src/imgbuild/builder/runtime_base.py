"""The runtime base: a stand-in that can `import vllm`: a bookworm rootfs plus every wheel of the platform's
lock, installed on the host by `uv pip install --target --python-platform` (nothing under qemu; uv's cache keeps
the wheels), then built by BuildKit; tagged by a digest of its inputs."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
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
from imgbuild.engine import Engine, ImageInfo
from imgbuild.errors import StateError, UpstreamError
from imgbuild.platforms import Platform
from imgbuild.upstream import pip

REPOSITORY = "imgbuild-runtime"
FORMAT = "imgbuild-runtime/3"  # 3: installed by uv
LABEL = "imgbuild.runtime-base"
INCLUDE = ("python3", "libstdc++6", "procps")  # procps: a standalone `kill`, which sparkrun's health check runs
IMAGE_PYTHON = "/usr/bin/python3"
BIN = "usr/local/bin"


@dataclass(frozen=True)
class RuntimeSpec:
    platform: Platform
    lock: rl.Lock
    site_packages: str = SITE_PACKAGES

    @property
    def rootfs(self) -> RootfsRecipe:
        return RootfsRecipe(self.platform.arch, include=INCLUDE)

    def key(self) -> str:
        parts = [FORMAT, str(self.platform), self.rootfs.key(), self.lock.digest(), self.site_packages]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.platform.arch}-{self.key()[:12]}"


@dataclass(frozen=True)
class RuntimeResult:
    info: ImageInfo
    built: bool
    seconds: float


def _uv(args: list[str], *, verbose: bool, what: str, stdin: str | None = None) -> str:
    """uv's stdout; a failure is an UpstreamError with the end of uv's log."""
    done = pip.run_uv(args, verbose=verbose, stdin=stdin)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or "").strip().splitlines()[-15:])
        raise UpstreamError(f"uv {what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout or ""


def _target_args(platform: Platform) -> list[str]:
    return ["--python-platform", rl.uv_platform(platform), "--python-version", rl.PYTHON_VERSION,
            "--only-binary", ":all:"]  # fmt: skip


@contextlib.contextmanager
def cache_lock(cache: Path) -> Iterator[None]:
    """One imgbuild at a time builds a runtime base; staging a killed run left is removed under it."""
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
    """A staging directory in the runtime cache, removed after."""
    return tempfile.TemporaryDirectory(prefix=f".staging-{what}-", dir=cache / "runtime", ignore_cleanup_errors=True)


# -- the installed tree -----------------------------------------------------
def fix_shebangs(bin_dir: Path, python: str = IMAGE_PYTHON) -> list[str]:
    """Point console scripts the installer wrote for the host's python at the image's."""
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


def install_tree(lock: rl.Lock, target: Path, *, verbose: bool = False) -> None:
    """Install every locked wheel into `target` for the lock's platform (nothing is run from them); uv
    downloads what its cache lacks and checks every file against the lock's hashes."""
    req = target.parent / "lock.txt"
    req.write_text(lock.text)
    log(f"installing {len(lock.pins)} locked wheels for {lock.platform} on the host (uv; downloads once)")
    args = ["pip", "install", "--require-hashes", "--no-deps", "--link-mode", "copy", "--target", str(target)]
    _uv([*args, "-r", str(req), *_target_args(lock.platform)], verbose=verbose, what=f"install for {lock.platform}")
    (target / ".lock").unlink(missing_ok=True)  # uv's lock on the target, not part of the tree
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
    info = engine.image(spec.tag)
    if info is not None and info.labels.get(LABEL) == spec.key() and not force:
        return RuntimeResult(info, False, time.monotonic() - start)
    with cache_lock(cache):
        rootfs = ensure_rootfs(spec.rootfs, cache, verbose=verbose)
        with _staging(cache, "build") as tmp:
            target = Path(tmp) / "tree"
            install_tree(spec.lock, target, verbose=verbose)
            log(f"building {spec.tag} (BuildKit: the rootfs and the installed tree)")
            context = build_context(target, rootfs, spec.site_packages, labels_of(spec))
            engine.build(
                context, tags=[spec.tag], platforms=[spec.platform], epoch=BASE_EPOCH, compress=False, verbose=verbose
            )
    return RuntimeResult(engine.require(spec.tag), True, time.monotonic() - start)


def relock(
    root: Path, platform: Platform, vllm_version: str, *, overrides: Sequence[str] = (), verbose: bool = False
) -> rl.Lock:
    """Resolve vllm==VERSION for `platform` with uv (network), under `constraints.txt` beside the locks if there is
    one and with `overrides` (`project==version` lines: the overrides of patches/upstream.yaml in effect, passed as
    uv's `--override`), and write its lock file."""
    log(f"resolving {rl.ROOT}=={vllm_version} for {platform} with uv")
    args = ["pip", "compile", "-", "--generate-hashes", "--no-header", "--no-annotate", *_target_args(platform)]
    constraints = root / rl.LOCK_DIR / "constraints.txt"
    args += ["--constraint", str(constraints)] if constraints.is_file() else []
    stdin = f"{rl.ROOT}=={vllm_version}\n"
    with tempfile.TemporaryDirectory(prefix="imgbuild-relock-") as tmp:
        if overrides:
            listed = Path(tmp) / "overrides.txt"
            listed.write_text("".join(f"{line}\n" for line in overrides))
            args += ["--override", str(listed)]
            log(f"uv --override: {', '.join(overrides)} (patches/upstream.yaml)")
        out = _uv(args, verbose=verbose, what=f"resolve for {platform}", stdin=stdin)
    text = rl.header(platform, overrides) + out
    path = root / rl.LOCK_DIR / rl.lock_name(platform)
    lock = rl.parse_lock(text, path, platform)
    write_text(path, text)
    return lock
