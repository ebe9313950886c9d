"""The runtime base: a stand-in base that can `import vllm` (the skeleton plus the locked wheels).

Per platform, the image is

- a Debian bookworm rootfs with the full python3 (3.11: asyncio, ctypes... are not in
  python3-minimal) and libstdc++6 (torch's C++ runtime), made by mmdebstrap and cached;
- one layer with every wheel of `images/runtime-lock/<platform>.txt` (vllm itself included)
  installed on the host by pip (`--target --platform --no-deps --require-hashes`, from
  wheels cached by sha256), so nothing runs under qemu at build time. It goes to the
  site-packages the stock image uses, which a .pth makes a site directory of bookworm's
  python (`site.addsitedir`, so the .pth files wheels ship there, e.g. cutlass's, work);
  console scripts go to /usr/local/bin with their shebang set to the image's python3.
  No byte code is compiled: measured, it saves nothing on `import vllm` here (the time
  goes to loading torch's libraries), and costs minutes and 10% of the size.

The layer is never written to disk: its size is known from the tree before a byte of
it is made (fixed headers), so it is streamed, hashed on the way, into `docker load`
with the image config after it.

The image is tagged by a digest of the lock, the rootfs recipe and this format: a warm
build finds it and does nothing. Wheels download into a staging directory and move into
`<cache>/runtime/wheels/<sha256>/` only after their hash is checked, under a lock, so an
interrupted run leaves the cache sound.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from imgbuild.digests import sha256_file
from imgbuild.errors import DockerError, StateError, UpstreamError
from imgbuild.images import runtime_lock as rl
from imgbuild.images.docker import Engine, ImageInfo
from imgbuild.images.skeleton import (
    PTH,
    SITE_PACKAGES,
    RootfsRecipe,
    archive_metadata,
    base_config,
    ensure_rootfs,
)
from imgbuild.upstream import pip

REPOSITORY = "imgbuild-runtime"
FORMAT = "imgbuild-runtime/2"
LABEL = "imgbuild.runtime-base"
INCLUDE = ("python3", "libstdc++6")
IMAGE_PYTHON = "/usr/bin/python3"
BIN = "usr/local/bin"
PIP_ENV = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _log(msg: str) -> None:
    print(f"imgbuild: {msg}", file=sys.stderr, flush=True)


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


def _staging(cache: Path, what: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f".staging-{what}-", dir=cache / "runtime"))


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
    _log(f"downloading {len(missing)} of {len(lock.pins)} locked wheels for {lock.platform} (once; cached by sha256)")
    staging = _staging(cache, "download")
    try:
        req = staging / "requirements.txt"
        req.write_text("".join(p.line() + "\n" for p in missing))
        out = staging / "wheels"
        args = ["download", "--no-deps", "--require-hashes", "-d", str(out), "-r", str(req)]
        _pip([*args, *_target_args(lock.platform)], verbose=True, what=f"download for {lock.platform}")
        by_hash = {p.sha256: p for p in missing}
        for path in sorted(out.iterdir()):
            digest = sha256_file(path)
            if digest not in by_hash:
                raise UpstreamError(f"pip downloaded {path.name}, which the lock does not name (sha256 {digest})")
            final = wheel_dir(cache) / digest
            final.mkdir(parents=True, exist_ok=True)
            os.replace(path, final / path.name)
            del by_hash[digest]
        if by_hash:
            names = ", ".join(f"{p.name}=={p.version}" for p in by_hash.values())
            raise UpstreamError(f"pip did not download {names}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
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
    _log(f"installing {len(lock.pins)} wheels for {lock.platform} on the host (pip --target; a few minutes)")
    args = ["install", "--no-index", "--no-deps", "--require-hashes", "--no-compile", "--no-warn-script-location"]
    args += ["--target", str(target), "-r", str(req)]
    _pip([*args, *_target_args(lock.platform)], verbose=verbose, what=f"install for {lock.platform}")
    fix_shebangs(target / "bin")


def pth_text(site_packages: str) -> bytes:
    """Makes site-packages a site directory, so the .pth files wheels put there are read too."""
    return f"import site; site.addsitedir({site_packages!r})\n".encode()


def layer_entries(target: Path, site_packages: str) -> list[tuple[str, Path | None]]:
    """(name in the layer, host path) in a fixed order; None for made-up parent directories and the .pth."""
    site = site_packages.strip("/")
    out: dict[str, Path | None] = {}
    for root, dirs, files in os.walk(target):
        dirs.sort()
        rel = Path(root).relative_to(target)
        for name in [*dirs, *files]:
            sub = (rel / name).as_posix()
            top = f"{BIN}/{sub[4:]}" if sub == "bin" or sub.startswith("bin/") else f"{site}/{sub}"
            out[top.rstrip("/")] = Path(root) / name
    out.pop(BIN, None)
    out[PTH] = None
    for name in list(out):
        for parent in _dirs(name):
            out.setdefault(parent, None)
    return sorted(out.items())


def _dirs(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _member(name: str, path: Path | None, site_packages: str) -> tuple[tarfile.TarInfo, Path | bytes | None]:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
    if name == PTH:
        data = pth_text(site_packages)
        info.mode, info.size = 0o644, len(data)
        return info, data
    if path is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        return info, None
    st = path.lstat()
    if path.is_symlink():
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
        return info, None
    if path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        return info, None
    info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
    return info, path


def _header(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")


def _pad(n: int) -> int:
    return -n % tarfile.BLOCKSIZE


class LayerStream(io.RawIOBase):
    """The runtime layer as a tar, made while it is read; `size` is known up front, `diff_id` at the end."""

    def __init__(self, target: Path, site_packages: str) -> None:
        self.members = [_member(n, p, site_packages) for n, p in layer_entries(target, site_packages)]
        self.size = sum(len(_header(i)) + i.size + _pad(i.size) for i, _ in self.members) + 2 * tarfile.BLOCKSIZE
        self._hash = hashlib.sha256()
        self._chunks = self._generate()
        self._chunk, self._pos = b"", 0
        self._given = 0
        self.done = False

    @property
    def diff_id(self) -> str:
        if self._given != self.size:
            raise RuntimeError(f"the layer was read to byte {self._given} of {self.size}")
        if not self.done and next(self._chunks, None) is not None:
            raise RuntimeError(f"the layer came out longer than the {self.size} bytes announced")
        return f"sha256:{self._hash.hexdigest()}"

    def readable(self) -> bool:
        return True

    def _generate(self) -> Iterator[bytes]:
        for info, src in self.members:
            yield _header(info)
            if isinstance(src, bytes):
                yield src
            elif isinstance(src, Path):
                left = info.size
                with src.open("rb") as fh:
                    while left:
                        chunk = fh.read(min(left, 1 << 20))
                        if not chunk:
                            raise OSError(f"{src} shrank while the runtime layer was written")
                        left -= len(chunk)
                        yield chunk
            if _pad(info.size):
                yield b"\0" * _pad(info.size)
        yield b"\0" * (2 * tarfile.BLOCKSIZE)

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        while self._pos >= len(self._chunk):
            if self.done:
                return 0
            try:
                self._chunk, self._pos = next(self._chunks), 0
            except StopIteration:
                self.done = True
                return 0
            self._hash.update(self._chunk)
        n = min(len(view), len(self._chunk) - self._pos)
        view[:n] = self._chunk[self._pos : self._pos + n]
        self._pos += n
        self._given += n
        return n


def write_layer(target: Path, site_packages: str, out: Path) -> str:
    """The runtime layer as a file (tests; builds stream it); returns its diff id."""
    stream = LayerStream(target, site_packages)
    with out.open("wb") as fh:
        shutil.copyfileobj(stream, fh, 1 << 20)
    return stream.diff_id


def image_config(spec: RuntimeSpec, diff_ids: list[str], rootfs_cmd: str) -> dict[str, object]:
    vllm = spec.lock.pin(rl.ROOT)
    labels = {
        LABEL: spec.key(),
        "imgbuild.runtime.lock": spec.lock.digest(),
        "imgbuild.site-packages": spec.site_packages,
        "imgbuild.runtime.vllm": vllm.version if vllm else "",
        "org.opencontainers.image.description": "imgbuild runtime base: stand-in that can import vllm",
    }
    made = f"imgbuild runtime: {len(spec.lock.pins)} locked wheels (pip --target)"
    return base_config(spec.arch, labels, diff_ids, [rootfs_cmd, made])


def _stream_archive(spec: RuntimeSpec, rootfs: Path, layer: LayerStream) -> Callable[[IO[bytes]], None]:
    """A docker-archive: both layers first, then the config (it needs the streamed layer's diff id)."""
    made_by = " ".join(spec.rootfs.command(Path("OUT.tar"))[:6])

    def write(out: IO[bytes]) -> None:
        with tarfile.open(fileobj=out, mode="w|") as tar:
            tar.copybufsize = 1 << 20  # type: ignore[attr-defined]  # 16 KiB reads would make this CPU-bound
            tar.add(rootfs, arcname="rootfs/layer.tar")
            info = tarfile.TarInfo("runtime/layer.tar")
            info.size = layer.size
            # tarfile takes a short read for the end: BufferedReader reads until full
            tar.addfile(info, io.BufferedReader(layer, 1 << 20))
            diff_ids = [f"sha256:{sha256_file(rootfs)}", layer.diff_id]
            config = image_config(spec, diff_ids, made_by)
            for name, data in archive_metadata(config, spec.tag, ["rootfs/layer.tar", "runtime/layer.tar"]):
                member = tarfile.TarInfo(name)
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))

    return write


def load_streamed(engine: Engine, write: Callable[[IO[bytes]], None]) -> None:
    """`docker load` from a pipe, so the multi-GB archive is never written to disk."""
    rfd, wfd = os.pipe()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(wfd, "wb") as out:
                write(out)
        except BrokenPipeError:
            pass
        except (OSError, tarfile.TarError, RuntimeError) as exc:  # handed to the caller below
            errors.append(exc)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    failed: DockerError | None = None
    try:
        with os.fdopen(rfd, "rb") as src:
            engine.load(src)
    except DockerError as exc:
        failed = exc
    finally:
        thread.join()
    if errors:  # the cause, when writing failed first
        raise DockerError(f"writing the runtime base's archive failed: {errors[0]}") from errors[0]
    if failed is not None:
        raise failed


def ensure_runtime(
    engine: Engine, spec: RuntimeSpec, cache: Path, *, force: bool = False, verbose: bool = False
) -> RuntimeResult:
    """The runtime base for `spec`, built and loaded if the daemon lacks it."""
    start = time.monotonic()
    size = 0
    info = engine.image(spec.tag)
    if info is not None and info.labels.get(LABEL) == spec.key() and not force:
        return RuntimeResult(info, False, 0, size, time.monotonic() - start)
    with cache_lock(cache):
        fetched = fetch_wheels(spec.lock, cache)
        size = sum(w.stat().st_size for p in spec.lock.pins if (w := cached_wheel(cache, p)))
        rootfs = ensure_rootfs(spec.rootfs, cache, verbose=verbose)
        staging = _staging(cache, "build")
        try:
            target = staging / "tree"
            install_tree(spec.lock, cache, target, verbose=verbose)
            layer = LayerStream(target, spec.site_packages)
            _log(f"loading {spec.tag} ({layer.size / 1e9:.1f} GB layer, streamed) into the daemon")
            load_streamed(engine, _stream_archive(spec, rootfs, layer))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    info = engine.require(spec.tag)
    if info.arch != spec.arch:
        raise DockerError(f"{spec.tag} loaded as {info.platform}, expected {spec.platform}")
    return RuntimeResult(info, True, fetched, size, time.monotonic() - start)


# -- relocking ----------------------------------------------------------------
def relock(root: Path, platform: str, vllm_version: str, *, verbose: bool = False) -> rl.Lock:
    """Resolve vllm==VERSION for `platform` with pip (network) and write its lock file."""
    exclusions = rl.load_exclusions(root)
    with tempfile.TemporaryDirectory(prefix="imgbuild-relock-") as tmp:
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "--ignore-installed", "--use-feature=fast-deps", "--report", str(report)]
        args += ["--target", str(Path(tmp) / "t"), f"{rl.ROOT}=={vllm_version}"]
        _log(f"resolving {rl.ROOT}=={vllm_version} for {platform} with pip (a few minutes)")
        _pip([*args, *_target_args(platform)], verbose=verbose, what=f"resolve for {platform}")
        lock = rl.lock_from_report(json.loads(report.read_text()), platform, exclusions)
    path = root / rl.LOCK_DIR / rl.lock_name(platform)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_name(f".{path.name}.tmp")
    tmp_path.write_text(lock.text())
    os.replace(tmp_path, path)
    return lock
