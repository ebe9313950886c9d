"""The containers a process made, by the owner label imgbuild puts on each (imgbuild.owner.Owner)."""

from __future__ import annotations

from imgbuild.engine import Engine
from imgbuild.owner import OWNER_LABEL, Owner


def containers_of(engine: Engine, pid: int) -> list[str]:
    """Ids of the containers labelled as made by `pid` (of any boot or pid namespace)."""
    found = engine.client.api.containers(all=True, filters={"label": OWNER_LABEL})
    owners = {c["Id"]: Owner.parse((c.get("Labels") or {}).get(OWNER_LABEL, "")) for c in found}
    return [cid for cid, owner in owners.items() if owner is not None and owner.pid == pid]
