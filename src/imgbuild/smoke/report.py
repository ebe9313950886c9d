"""A smoke test's result as values: each check, each planned file's state, one image's report and a run's. Kept
apart from the checks (smoke/checks.py, which need the engine and the project's config) so that a result can be
read and printed without them (a build that finds nothing to do, builder/receipt.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from imgbuild.platforms import Platform
from imgbuild.shapes import NULLABLE, Seconds, derived, omitted_unless_set
from imgbuild.smoke.supply import SupplyChain

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    group: str  # config, files, runtime, command, import, launcher
    name: str
    status: Status
    detail: str = ""
    seconds: Seconds = 0.0


@dataclass(frozen=True)
class FileState:
    path: str
    expected: str  # patched / original
    actual: str  # patched / original / absent / other
    expected_sha256: str
    actual_sha256: str | None
    ok: bool = derived()  # the image has the expected content

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", self.actual_sha256 == self.expected_sha256)


@dataclass(frozen=True)
class SmokeReport:
    """One image smoke-tested: each check, and each patched file's state in the image."""

    image: str
    image_id: Annotated[str, NULLABLE]
    variant: str | None
    platform: Annotated[Platform, NULLABLE]
    ok: bool = derived()  # no check failed (the supply chain, with --key, is the run's verdict: `SmokeRun.ok`)
    checks: tuple[Check, ...] = ()
    files: tuple[FileState, ...] = ()
    supply_chain: Annotated[SupplyChain | None, omitted_unless_set("only with --key (smoke)")] = None
    name: Annotated[str, Field(exclude=True)] = ""  # how tables call the image (e.g. its moving tag); default: image

    @property
    def title(self) -> str:
        return self.name or self.image

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", all(c.status != "fail" for c in self.checks))

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]


@dataclass(frozen=True)
class SmokeRun:
    """Every image a smoke run checked; `ok`: no check failed and, with --key, every supply chain is verified."""

    ok: bool = derived()
    reports: tuple[SmokeReport, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", not self.failed)

    @property
    def failed(self) -> list[str]:
        """What failed, one line per image: its failing checks, its supply chain's failures."""
        out = [f"{r.image}: {len(r.failures)} failing checks" for r in self.reports if not r.ok]
        chains = [(r.image, r.supply_chain) for r in self.reports if r.supply_chain is not None]
        return out + [f"{image}: {'; '.join(chain.failures())}" for image, chain in chains if not chain.ok]
