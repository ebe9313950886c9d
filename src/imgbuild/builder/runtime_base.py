"""The runtime base: a stand-in that can `import vllm`: a bookworm rootfs plus every wheel of the platform's
lock, installed on the host by `uv pip install --target --python-platform` (nothing under qemu; uv's cache keeps
the wheels), cut into package-granular layers (`runtime_layers`: one deterministic tar per large package, stable
buckets for the small ones), which are the blobs of an OCI layout in the cache, then built by BuildKit `FROM` that
layout; tagged by a digest of its inputs. A layer the cache has (same wheel, same layer key) is not written again,
so a bump writes, stores and moves the packages it changes."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from imgbuild.atomic import write_text
from imgbuild.builder import runtime_bytecode as bytecode
from imgbuild.builder import runtime_layers as layers
from imgbuild.builder import runtime_lock as rl
from imgbuild.builder.skeleton import (
    BASE_EPOCH,
    PTH,
    SITE_PACKAGES,
    RootfsRecipe,
    base_dockerfile,
    ensure_rootfs,
    log,
)
from imgbuild.engine import Engine, ImageInfo
from imgbuild.errors import DockerError, ImgbuildError, StateError, UpstreamError, disk_full, looks_full
from imgbuild.platforms import Platform
from imgbuild.upstream import pip

REPOSITORY = "imgbuild-runtime"
FORMAT = "imgbuild-runtime/6"  # 3: installed by uv; 4: package-granular layers; 5: in dependency order;
# 6: checked-hash bytecode in the package layers (runtime_bytecode)
LABEL = "imgbuild.runtime-base"
BYTECODE_LABEL = "imgbuild.runtime.bytecode"  # the package layers' .pyc: mode, cache tag, magic number
INCLUDE = ("python3", "libstdc++6", "procps")  # procps: a standalone `kill`, which sparkrun's health check runs
IMAGE_PYTHON = "/usr/bin/python3"
BIN = "usr/local/bin"


@dataclass(frozen=True)
class RuntimeSpec:
    platform: Platform
    lock: rl.RuntimeLock
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
    """One imgbuild at a time builds a runtime base; what a killed run left half-done is removed under it."""
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
        for leftover in [*base.glob(".staging-*"), *base.glob(".context-*")]:
            shutil.rmtree(leftover, ignore_errors=True)
        layout = layout_dir(cache)  # and the temp files of writes a killed run left (never read: they start with .)
        for leftover in [*layout.glob("blobs/sha256/.new-*"), *layout.glob("keys/.*"), *layout.glob(".*")]:
            leftover.unlink(missing_ok=True)
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
            mode = path.stat().st_mode & 0o7777
            new = path.with_name(f".{path.name}.shebang")
            new.write_bytes(f"#!{python}".encode() + nl + rest)
            new.chmod(mode)
            os.replace(new, path)  # a new file: the old one may be a hard link into uv's cache
            fixed.append(path.name)
    return fixed


def install_tree(lock: rl.RuntimeLock, target: Path, *, verbose: bool = False) -> None:
    """Install every locked wheel into `target` for the lock's platform (nothing is run from them); uv
    downloads what its cache lacks and checks every file against the lock's hashes. Hard links into uv's cache
    where it can (the tree is only read, and tarred; a file that is changed is replaced)."""
    req = target.parent / "lock.txt"
    req.write_text(lock.text)
    log(f"installing {len(lock.pins)} locked wheels for {lock.platform} on the host (uv; downloads once)")
    args = ["pip", "install", "--require-hashes", "--no-deps", "--link-mode", "hardlink", "--target", str(target)]
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


# -- the layers: an OCI layout in the cache ----------------------------------------
LAYER_FORMAT = "imgbuild-runtime-layer/1"
KEEP = 2  # manifests kept per platform in the layout (the newest build and the one before), and their blobs


def layout_dir(cache: Path) -> Path:
    return cache / "runtime" / "layers"


@dataclass(frozen=True)
class Layered:
    manifest: layers.Blob
    layers: tuple[tuple[str, layers.Blob], ...]  # (layer name, blob), bottom first
    written: tuple[str, ...]  # names of the layers whose tar was written this time (the rest were in the cache)


def pin_keys(lock: rl.RuntimeLock) -> dict[str, str]:
    """What identifies a dist's files: its pin and the hashes of its wheels."""
    return {p.name: f"{p.name}=={p.version} " + " ".join(sorted(p.hashes)) for p in lock.pins}


def layer_key(plan: layers.LayerPlan, pins: Mapping[str, str], context: str) -> str | None:
    """The cache key of a layer: its members' pins and its file list under `context` (format, platform, paths,
    uv); None for a layer not made of pinned dists alone (it is written every time)."""
    if not plan.members or any(m not in pins for m in plan.members):
        return None
    parts = [LAYER_FORMAT, context, plan.name, *(pins[m] for m in plan.members), *plan.files]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class _Layout:
    """The OCI layout: blobs by digest, `keys/KEY` -> a blob's digest and size, `index.json` of kept manifests."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"
        self.keys = root / "keys"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.keys.mkdir(exist_ok=True)
        write_text(root / "oci-layout", '{"imageLayoutVersion":"1.0.0"}')

    def path(self, digest: str) -> Path:
        return self.blobs / digest.removeprefix("sha256:")

    def cached(self, key: str | None) -> layers.Blob | None:
        if key is None or not (self.keys / key).is_file():
            return None
        digest, size = (self.keys / key).read_text().split()
        path = self.path(digest)
        return layers.Blob(digest, int(size)) if path.is_file() and path.stat().st_size == int(size) else None

    def put(self, key: str | None, write: Callable[[IO[bytes]], tuple[str, int]]) -> layers.Blob:
        fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=".new-")
        try:
            with os.fdopen(fd, "wb") as fh:  # its close writes what is buffered: a full disk can stop it there too
                digest, size = write(fh)
            os.replace(tmp, self.path(digest))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        if key is not None:
            write_text(self.keys / key, f"{digest} {size}\n")
        return layers.Blob(digest, size)

    def put_bytes(self, data: bytes) -> layers.Blob:
        def write(fh: IO[bytes]) -> tuple[str, int]:
            fh.write(data)
            return f"sha256:{hashlib.sha256(data).hexdigest()}", len(data)

        return self.put(None, write)

    def record(self, manifest: layers.Blob, platform: Platform, ref: str) -> None:
        """Put `manifest` first in index.json (at most KEEP per platform), then drop the blobs and keys that no kept
        manifest needs."""
        index = self.root / "index.json"
        old = json.loads(index.read_text()).get("manifests", []) if index.is_file() else []
        entry = {
            "mediaType": layers.MANIFEST_MEDIA,
            "digest": manifest.digest,
            "size": manifest.size,
            "platform": {"os": platform.os, "architecture": platform.arch, **_variant(platform)},
            "annotations": {"org.opencontainers.image.ref.name": ref},
        }
        kept, per = [entry], {str(platform): 1}
        for item in old:
            p = item.get("platform", {})
            name = "/".join(x for x in (p.get("os"), p.get("architecture"), p.get("variant")) if x)
            if item.get("digest") == manifest.digest or per.get(name, 0) >= KEEP:
                continue
            per[name] = per.get(name, 0) + 1
            kept.append(item)
        write_text(index, json.dumps({"schemaVersion": 2, "manifests": kept}, indent=1) + "\n")
        self._collect({str(m["digest"]) for m in kept})

    def _collect(self, manifests: set[str]) -> None:
        live = set(manifests)
        for digest in manifests:
            try:
                doc = json.loads(self.path(digest).read_bytes())
            except (OSError, ValueError):
                continue
            live |= {doc["config"]["digest"], *(lay["digest"] for lay in doc["layers"])}
        for blob in self.blobs.iterdir():
            if f"sha256:{blob.name}" not in live and not blob.name.startswith("."):
                blob.unlink()
        for key in self.keys.iterdir():
            if not key.name.startswith(".") and key.read_text().split()[0] not in live:  # .x: a killed write's temp
                key.unlink()


def _variant(platform: Platform) -> dict[str, str]:
    return {"variant": platform.oci_variant} if platform.oci_variant else {}


def _tar_writer(entries: Mapping[str, Path]) -> Callable[[IO[bytes]], tuple[str, int]]:
    return lambda fh: layers.write_tar(entries, fh)


def _uv_version() -> str:
    try:
        return importlib.metadata.version("uv")
    except importlib.metadata.PackageNotFoundError:
        return "?"


def write_layers(
    tree: Path,
    rootfs: Path,
    layout_root: Path,
    *,
    platform: Platform,
    site_packages: str,
    pins: Mapping[str, str],
    last: Sequence[str] = (rl.ROOT,),
    extra: Mapping[str, bytes] | None = None,
    compiled_by: str = "",
) -> Layered:
    """The rootfs, `extra` (archive name -> bytes: imgbuild's own small files) and the installed `tree` as layers
    of an image in the OCI layout at `layout_root`; a layer whose key the layout has is not written again.
    `compiled_by`: what compiled the tree's bytecode (`Compiler.describe`), part of every layer's key."""
    store = _Layout(layout_root)
    context = "\n".join([str(platform), site_packages, BIN, f"uv {_uv_version()}", compiled_by])
    out: list[tuple[str, layers.Blob]] = []
    written: list[str] = []

    def add(name: str, key: str | None, write: Callable[[IO[bytes]], tuple[str, int]]) -> None:
        blob = store.cached(key)
        if blob is None:
            blob = store.put(key, write)
            written.append(name)
        out.append((name, blob))

    st = rootfs.stat()
    root_id = f"{LAYER_FORMAT}\nrootfs\n{rootfs.name}\n{st.st_size}\n{st.st_mtime_ns}"  # the cached rootfs file
    root_key = hashlib.sha256(root_id.encode()).hexdigest()

    def write_rootfs(fh: IO[bytes]) -> tuple[str, int]:
        with rootfs.open("rb") as src:
            return layers.rewrite_rootfs(src, fh)

    add("rootfs", root_key, write_rootfs)
    if extra:
        with tempfile.TemporaryDirectory() as tmp:
            entries = {}
            for i, (name, data) in enumerate(sorted(extra.items())):
                (Path(tmp) / str(i)).write_bytes(data)
                entries[name] = Path(tmp) / str(i)
            add("imgbuild", None, _tar_writer(entries))
    for plan in layers.split(layers.read_dists(tree), layers.walk_files(tree), last=last):
        add(
            plan.name,
            layer_key(plan, pins, context),
            _tar_writer(layers.tree_entries(tree, plan.files, site_packages, BIN)),
        )
    blobs = [b for _, b in out]
    config = store.put_bytes(
        layers.canonical(layers.image_config(platform.arch, _variant(platform).get("variant"), out))
    )
    manifest = store.put_bytes(layers.canonical(layers.manifest(config, blobs, {})))
    return Layered(manifest, tuple(out), tuple(written))


def build_context(context: Path, labels: dict[str, str]) -> Path:
    """A build context of one Dockerfile: `FROM` the layout image (the named context `base`), PATH, labels and the
    stock ENTRYPOINT on top."""
    context.mkdir(parents=True, exist_ok=True)
    (context / "Dockerfile").write_text(base_dockerfile(labels, [], source="base"))
    return context


def build_layered(
    engine: Engine,
    tree: Path,
    rootfs: Path,
    cache: Path,
    *,
    tag: str,
    platform: Platform,
    site_packages: str,
    pins: Mapping[str, str],
    labels: dict[str, str],
    no_cache: bool = False,
    verbose: bool = False,
    compiled_by: str = "",
) -> Layered:
    """`tree` and `rootfs` as the layered image `tag`: the layers into the cache's layout, then BuildKit (`no_cache`:
    without its cache)."""
    layout = layout_dir(cache)
    made = write_layers(
        tree, rootfs, layout, platform=platform, site_packages=site_packages, pins=pins,
        extra={PTH: pth_text(site_packages)}, compiled_by=compiled_by,
    )  # fmt: skip
    log(f"layers: {len(made.layers)}, {len(made.written)} written, the rest from the cache ({layout})")
    with tempfile.TemporaryDirectory(prefix=".context-", dir=layout.parent) as tmp:
        try:
            engine.build(
                build_context(Path(tmp), labels), tags=[tag], platforms=[platform], epoch=BASE_EPOCH, compress=False,
                contexts={"base": f"oci-layout://{layout}@{made.manifest.digest}"}, no_cache=no_cache, verbose=verbose,
            )  # fmt: skip
        except DockerError as exc:
            said = lost_blob_hint(exc, no_cache=no_cache)
            if said is exc:
                raise
            raise said from exc
    _Layout(layout).record(made.manifest, platform, tag)
    return made


def lost_blob_hint(exc: DockerError, *, no_cache: bool) -> DockerError:
    """A runtime base build BuildKit failed with "not found", with the way out said. Seen once here (after a full
    disk), never reproduced: BuildKit's cache named a layer blob it could not load, and BuildKit has no fallback
    but --no-cache (solver/edge.go loadCache, v0.13.2). Said, not retried: a retry doubled every such build."""
    if "not found" not in exc.message or no_cache or exc.hint:
        return exc
    hint = "if BuildKit's cache lost a layer, `imgbuild skeleton --runtime --force` builds the base without that cache"
    return DockerError(exc.message, hint=hint, details=exc.details)


def ensure_runtime(
    engine: Engine, spec: RuntimeSpec, cache: Path, *, force: bool = False, verbose: bool = False
) -> RuntimeResult:
    """The runtime base for `spec`, built if the daemon lacks it (`force`: built again, without BuildKit's cache)."""
    start = time.monotonic()
    info = engine.image(spec.tag)
    if info is not None and info.labels.get(LABEL) == spec.key() and not force:
        return RuntimeResult(info, False, time.monotonic() - start)
    with cache_lock(cache), _steps(cache) as step:
        step("making the rootfs", cache / "skeleton")
        rootfs = ensure_rootfs(spec.rootfs, cache, verbose=verbose)
        step(f"installing the {len(spec.lock.pins)} locked wheels for {spec.platform} (uv)", cache / "runtime")
        with _staging(cache, "build") as tmp:
            target = Path(tmp) / "tree"
            install_tree(spec.lock, target, verbose=verbose)
            step("compiling the tree's bytecode", cache / "runtime")
            compiler = bytecode.find_compiler(rl.PYTHON_VERSION)
            made = bytecode.compile_tree(target, spec.site_packages, cache, compiler)
            log(
                f"bytecode ({compiler.describe()}): {made.modules} modules, {made.compiled} compiled, "
                f"{made.cached} from the cache, {made.refused} not compilable, {made.seconds:.1f} s"
            )
            step(f"writing the package layers and building {spec.tag}", cache / "runtime")
            log(f"building {spec.tag} (BuildKit, from the package layers of the installed tree)")
            build_layered(
                engine, target, rootfs, cache, tag=spec.tag, platform=spec.platform,
                site_packages=spec.site_packages, pins=pin_keys(spec.lock),
                labels={**labels_of(spec), BYTECODE_LABEL: compiler.label()}, no_cache=force, verbose=verbose,
                compiled_by=compiler.describe(),
            )  # fmt: skip
    return RuntimeResult(engine.require(spec.tag), True, time.monotonic() - start)


@contextlib.contextmanager
def _steps(cache: Path) -> Iterator[Callable[[str, Path], None]]:
    """Names the step under way, so that a disk that fills in it (uv's `No space left on device`, an OSError, a
    tool that fails with almost nothing free) is one error naming the step and the directory to free. Nothing a
    step half-wrote is used later: the install's staging goes with its directory, a layer blob or key is renamed
    into place only once whole, and the tag is written by BuildKit last."""
    current = ("starting", cache)

    def step(what: str, where: Path) -> None:
        nonlocal current
        current = (what, where)

    try:
        yield step
    except (OSError, ImgbuildError) as exc:
        what, where = current
        if not looks_full(exc, where):
            raise
        raise disk_full(f"the runtime base stopped while {what}", where) from exc


def relock(
    root: Path, platform: Platform, vllm_version: str, *, overrides: Sequence[str] = (), verbose: bool = False
) -> rl.RuntimeLock:
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
