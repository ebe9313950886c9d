"""What `smoke --key` says of a published image's supply chain: its signature and its SPDX SBOM, verified
(publish/signing.py verifies them with cosign)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from imgbuild.shapes import derived


@dataclass(frozen=True)
class Verified:
    ok: Annotated[bool, Field(serialization_alias="verified")]
    detail: str


@dataclass(frozen=True)
class SbomVerified(Verified):
    problems: tuple[str, ...] = ()  # where the verified SBOM disagrees with the image
    predicate: Annotated[dict[str, Any] | None, Field(exclude=True)] = None  # the SBOM, when verified


@dataclass(frozen=True)
class SupplyChain:
    """With --key, for a registry reference: the signature of what it names and the platform image's SPDX SBOM,
    verified."""

    ok: bool = derived()
    signature: Verified = Verified(False, "not checked")
    sbom: SbomVerified = SbomVerified(False, "not checked")

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", self.signature.ok and self.sbom.ok and not self.sbom.problems)

    @property
    def problems(self) -> tuple[str, ...]:
        return self.sbom.problems

    def failures(self) -> list[str]:
        """What is wrong, one line each: the signature or the SBOM not verified, where the SBOM disagrees."""
        unverified = [
            f"{what} not verified" for what, v in (("signature", self.signature), ("SBOM", self.sbom)) if not v.ok
        ]
        return [*unverified, *self.problems]
