"""The base's packages against the pins: the check a build makes (`check_packages`, on what base_probe.py read) and
what `plan --bases` shows (`bases_against_pins`, nothing pulled or built)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from imgbuild.builder import base_probe
from imgbuild.cache import cache_dir
from imgbuild.config.models import UpstreamPin
from imgbuild.engine import Engine
from imgbuild.errors import DockerError, UpstreamError
from imgbuild.patches.variants import VariantPlan
from imgbuild.plan.builds import BaseInfo, BaseMap
from imgbuild.plan.packages import Carried, PlanBase, carried, message, mismatches
from imgbuild.shapes import dump


def base_packages(engine: Engine, base: BaseInfo, cache: Path) -> Mapping[str, str]:
    """Canonical project name -> version, for every dist-info in the base's site-packages (base_probe.py)."""
    return base_probe.read(engine, base, {}, cache).packages


def check_packages(
    pins: Sequence[UpstreamPin], bases: BaseMap, facts: Mapping[tuple[str, str], base_probe.BaseFacts]
) -> None:
    """Refuse, before anything is built, a base whose packages are not the pins' (`facts`: base_probe's)."""
    for base in bases.values():
        found = mismatches(pins, facts[(base.image_id, base.site_packages)].packages)
        if found:
            text, hint = message(base.ref, found)
            details: dict[str, object] = {
                "base": base.ref,
                "platform": str(base.platform),
                "packages": [dump(m) for m in found],
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

    def shown(self) -> PlanBase:
        """The base as `plan --bases --json` prints it."""
        packages = [c.shown() for c in self.packages]
        return PlanBase(self.ref, list(self.variants), self.platform, self.image_id, packages, self.unread)


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
