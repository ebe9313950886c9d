"""A pinned package's release as a base image carries it, made into a wheel in imgbuild's wheel cache
(`imgbuild patches rebase --onto NAME=VERSION --from-base IMAGE`): for a release the package index lacks, such as
the FlashInfer 0.7.3 of the stock vLLM 0.34.0 image, so the stack can be carried onto what the base really has.

The installed files are read from the image (a created container, never started), each checked against the sha256
its `*.dist-info/RECORD` lists; a file changed after the install stops it, named. They are written into a wheel
stored without compression, sorted, with fixed dates, so one installed release gives the same bytes, and the same
sha256 in the pin, on every machine. From there it goes the way every pinned wheel goes: the cache mirror commits
its text files, `patches rebase` carries the stack onto it, the pin records it.

Checked, and why not: pip and uv build wheels from source trees, not from installed distributions; the `wheel`
project's `wheel pack` packs an unpacked wheel directory but writes RECORD afresh from the files, checking nothing
against the installed RECORD, and it would be one more dependency for thirty lines of zipfile."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import tarfile
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name

from imgbuild.builder.packages import base_packages
from imgbuild.config.models import WheelSource
from imgbuild.engine import Engine
from imgbuild.errors import ConfigError, DockerError, UpstreamError, UsageError
from imgbuild.plan.builds import BaseInfo
from imgbuild.platforms import Platform
from imgbuild.progress import Say
from imgbuild.project import Project

ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no build's clock in the wheel


def record_hash(data: bytes) -> str:
    """A RECORD hash: `sha256=` and the urlsafe base64 of the digest, unpadded (the wheel format)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def files_of(tar: bytes) -> dict[str, tuple[bytes, int]]:
    """A `docker cp` tar's regular files: path -> (bytes, mode)."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        for member in tf.getmembers():
            if member.isfile():
                fh = tf.extractfile(member)
                out[member.name] = (fh.read() if fh else b"", member.mode)
    return out


def make_wheel(files: dict[str, tuple[bytes, int]], dist_info: str) -> bytes:
    """A wheel of `files` (site-packages path -> (bytes, mode)) with a RECORD of them, stored, sorted, dated
    ZIP_DATE, `dist_info`'s files last (as the wheel format recommends)."""
    record = f"{dist_info}/RECORD"
    names = sorted((n for n in files if n != record), key=lambda n: (n.startswith(f"{dist_info}/"), n))
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for name in names:
        writer.writerow([name, record_hash(files[name][0]), len(files[name][0])])
    writer.writerow([record, "", ""])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, (data, mode) in [*((n, files[n]) for n in names), (record, (rows.getvalue().encode(), 0o644))]:
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.external_attr = ((0o755 if mode & 0o111 else 0o644) | 0o100000) << 16
            zf.writestr(info, data)
    return buf.getvalue()


def wheel_from_installed(installed: dict[str, tuple[bytes, int]], dist_info: str, where: str) -> tuple[bytes, str]:
    """The wheel's bytes and its tag (`py3-none-any`) from an installed distribution's files (site-packages path
    -> (bytes, mode)), each checked against its RECORD; `where` names the base in errors."""
    record = installed.get(f"{dist_info}/RECORD")
    if record is None:
        raise UpstreamError(f"{where}: {dist_info}/ has no RECORD, so its files cannot be checked")
    kept: dict[str, tuple[bytes, int]] = {}
    problems = []
    for row in csv.reader(io.StringIO(record[0].decode())):
        if not row or not row[0] or len(row) < 2:
            continue
        path, digest = row[0], row[1]
        if path.startswith(("../", "/")) or "/__pycache__/" in f"/{path}" or not digest:
            continue  # scripts outside site-packages, bytecode, and what the installer wrote (INSTALLER, RECORD)
        have = installed.get(path)
        if have is None:
            problems.append(f"{path}: listed in RECORD, missing from the base")
        elif record_hash(have[0]) != digest:
            problems.append(f"{path}: not the file RECORD lists ({digest})")
        else:
            kept[path] = have
    if problems:
        raise UpstreamError(
            f"{where}: the installed files are not what {dist_info}/RECORD says, so they are not the release:\n  "
            + "\n  ".join(problems[:20])
            + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""),
            hint="use a base whose package is as its installer left it",
        )
    wheel_meta = installed.get(f"{dist_info}/WHEEL", (b"", 0))[0].decode(errors="replace")
    tags = re.findall(r"^Tag:\s*(\S+)\s*$", wheel_meta, flags=re.M)
    if not tags:
        raise UpstreamError(f"{where}: {dist_info}/WHEEL names no Tag, so the wheel's name is unknown")
    return make_wheel(kept, dist_info), tags[0]


def from_base(root: Path, onto: str, image: str, say: Say) -> Path:
    """For `--onto NAME=VERSION --from-base IMAGE`: write pin NAME's VERSION, as IMAGE carries it, into the wheel
    cache of that pin (where its mirror looks for it) and return the wheel's path."""
    from imgbuild.builder.skeleton import SITE_PACKAGES
    from imgbuild.upstream.mirror import Mirror

    project = Project.load(root)
    name, version = project.target(onto)
    pin = project.pin_named(name)
    if not isinstance(pin.source, WheelSource):
        raise ConfigError(f"--from-base: the {name} pin is not a wheel pin (source.kind: wheel)")
    if not re.fullmatch(r"v?[0-9][0-9A-Za-z.+!-]*", version):
        raise UsageError(f"--from-base takes a release version after {name}=, not {version!r}")
    version = version.removeprefix("v")
    mirror = Mirror(pin.source, pin.package_root)
    dest = mirror.wheel_path(version)
    if dest.exists():
        say(f"{dest.name} is in the wheel cache already: the base is not read")
        return dest
    configs = list(project.variant_configs.values())  # where the variants say packages live, and their platform
    site = next((c.image.site_packages for c in configs if c.image.site_packages), None) or SITE_PACKAGES
    first = next((c.image.platforms[0] for c in configs if c.image.platforms), None)
    platform = first if isinstance(first, Platform) else Platform.parse(first or "linux/arm64")
    engine = Engine.connect()
    info = engine.image(image)
    if info is None:
        say(f"base {image} is not in the local image store; pulling it for {platform}")
        info = engine.pull(image, platform)
    base = BaseInfo(image, info.id, None, info.platform, site)
    stem = re.sub(r"[-_.]+", "_", pin.source.project)
    have = base_packages(engine, base, mirror.root).get(canonicalize_name(pin.source.project))
    if have != version:
        raise UpstreamError(
            f"base {image} has {pin.source.project} {have or '(no *.dist-info in ' + site + ')'}, not {version}",
            hint=f"give the base's release: --onto {name}={have}" if have else "check image.site_packages",
        )
    dist_info = f"{stem}-{version}.dist-info"
    say(f"reading {pin.source.project} {version} from {image} ({site})")
    installed: dict[str, tuple[bytes, int]] = {}
    meta = engine.archive(info.id, f"{site}/{dist_info}", info.platform)
    if meta is None:
        raise DockerError(f"base {image}: no {site}/{dist_info}")
    installed.update(files_of(meta))
    tops = sorted({p.split("/", 1)[0] for p in _record_paths(installed, dist_info)})  # directories and modules
    for top in tops:
        if top != dist_info and (tree := engine.archive(info.id, f"{site}/{top}", info.platform)) is not None:
            installed.update(files_of(tree))
    data, tag = wheel_from_installed(installed, dist_info, f"base {image}")
    dest = dest.with_name(f"{stem}-{version}-{tag}.whl")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(dest)
    say(f"wrote {dest} (sha256 {hashlib.sha256(data).hexdigest()}, {len(data)} bytes)")
    return dest


def _record_paths(installed: dict[str, tuple[bytes, int]], dist_info: str) -> list[str]:
    record = installed.get(f"{dist_info}/RECORD")
    rows = csv.reader(io.StringIO(record[0].decode())) if record else iter(())
    return [row[0] for row in rows if row and not row[0].startswith(("../", "/"))]
