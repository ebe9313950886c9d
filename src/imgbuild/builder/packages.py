"""Read which packages a base carries: the `*.dist-info` directories of its site-packages, by name and version,
one container per base and site-packages, kept in the cache by the base's id (plan/packages.py compares them).

Checked, and why not: `importlib.metadata` in the base would import more and read every METADATA file under
emulation; the dist-info directory's name is the wheel's `{name}-{version}` (the binary distribution format), and
listing one directory is all this needs. The Docker API's archive endpoint cannot list a directory without
copying all of it (gigabytes for site-packages)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from imgbuild.atomic import write_json
from imgbuild.config.models import UpstreamPin
from imgbuild.engine import Engine, check_binfmt
from imgbuild.errors import DockerError, UpstreamError
from imgbuild.patches.variants import VariantPlan
from imgbuild.plan.builds import BaseInfo, BaseMap
from imgbuild.plan.packages import Carried, carried, message, mismatches
from imgbuild.upstream.mirror import cache_dir

KEPT = "packages"  # the cache's folder: one JSON per base and site-packages
FORMAT = "imgbuild-packages/1"
LIST = "import os, sys\nfor n in sorted(os.listdir(sys.argv[1])):\n    n.endswith('.dist-info') and print(n)\n"


def base_packages(engine: Engine, base: BaseInfo, cache: Path) -> dict[str, str]:
    """Canonical project name -> version, for every dist-info in the base's site-packages."""
    key = hashlib.sha256(f"{FORMAT}\n{base.image_id}\n{base.site_packages}".encode()).hexdigest()
    kept = cache / KEPT / f"{key}.json"
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        data = json.loads(kept.read_text())
        return {str(k): str(v) for k, v in data["packages"].items()}
    check_binfmt(base.platform, engine.arch)
    res = engine.run(
        base.image_id, ["-c", LIST, base.site_packages], platform=base.platform, entrypoint=["python3"], timeout=300
    )
    if res.exit_code != 0:
        raise DockerError(
            f"base {base.ref}: cannot list {base.site_packages}: {(res.stderr or res.stdout).strip()[-300:]!r}",
            hint="set image.site_packages in the variant's YAML to where the base's packages live",
        )
    packages = parse(res.stdout)
    with contextlib.suppress(OSError):  # a cache that cannot keep it asks again next time
        write_json(kept, {"format": FORMAT, "base": base.image_id, "packages": packages})
    return packages


def parse(listing: str) -> dict[str, str]:
    """`name-version.dist-info` lines -> canonical name -> version (the wheel spec escapes `-` in both parts)."""
    out: dict[str, str] = {}
    for line in listing.split():
        if not line.endswith(".dist-info"):
            continue
        name, sep, version = line.removesuffix(".dist-info").partition("-")
        if sep and version:
            out[canonicalize_name(name)] = version
    return out


def check_packages(engine: Engine, pins: Sequence[UpstreamPin], bases: BaseMap, cache: Path) -> None:
    """Refuse, before anything is built, a base whose packages are not the pins' (one read per base)."""
    checked: dict[tuple[str, str], list[Carried]] = {}
    for base in bases.values():
        key = (base.image_id, base.site_packages)
        if key in checked:
            continue
        checked[key] = found = mismatches(pins, base_packages(engine, base, cache))
        if found:
            text, hint = message(base.ref, found)
            details: dict[str, object] = {
                "base": base.ref,
                "platform": str(base.platform),
                "packages": [m.to_json() for m in found],
            }
            raise UpstreamError(text, hint=hint, details=details)


@dataclass(frozen=True)
class BaseCarries:
    """What `imgbuild plan --bases` shows of one base: its pinned packages, or why they were not read."""

    ref: str
    variants: tuple[str, ...]
    platform: str | None = None
    image_id: str | None = None
    packages: tuple[Carried, ...] = ()
    unread: str = ""  # why the base was not read ("" when it was)

    def to_json(self) -> dict[str, object]:
        return {
            "ref": self.ref,
            "variants": list(self.variants),
            "platform": self.platform,
            "image_id": self.image_id,
            "packages": [c.to_json() | {"agrees": c.agrees} for c in self.packages],
            "unread": self.unread or None,
        }


def bases_against_pins(
    engine: Engine | None, pins: Sequence[UpstreamPin], plans: Sequence[VariantPlan], cache: Path
) -> list[BaseCarries]:
    """Each variant's `image.base` as the local image store has it (nothing pulled or built), against the pins."""
    by_ref: dict[str, list[VariantPlan]] = {}
    for plan in plans:
        if plan.variant.image.base:
            by_ref.setdefault(plan.variant.image.base, []).append(plan)
    out = []
    for ref, users in by_ref.items():
        names = tuple(p.variant.name for p in users)
        info = engine.image(ref) if engine is not None else None
        if engine is None or info is None:
            why = "the Docker engine does not answer" if engine is None else "not in the local image store"
            out.append(BaseCarries(ref, names, unread=f"{why} (`imgbuild build` pulls it and checks it)"))
            continue
        site = users[0].variant.image.site_packages or info.labels.get("imgbuild.site-packages")
        if not site:
            out.append(BaseCarries(ref, names, str(info.platform), info.id, unread="image.site_packages is not set"))
            continue
        base = BaseInfo(ref, info.id, None, info.platform, site)
        found = tuple(carried(pins, base_packages(engine, base, cache)))
        out.append(BaseCarries(ref, names, str(info.platform), info.id, found))
    return out


def read_bases(pins: Sequence[UpstreamPin], plans: Sequence[VariantPlan]) -> list[BaseCarries]:
    """`bases_against_pins` on this machine's engine, if it answers (`plan --bases`)."""
    try:
        engine: Engine | None = Engine.connect()
    except DockerError:
        engine = None
    return bases_against_pins(engine, pins, plans, cache_dir())
