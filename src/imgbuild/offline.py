"""Offline: no network request (`imgbuild build --offline`, `IMGBUILD_OFFLINE=1`, a sparkrun offline launch).

One switch for the process and the imgbuild processes it starts, the environment variable (`--offline` sets it).
Each funnel that would fetch asks `refuse()` first, at the point where the cache has missed: the cache mirror's
git fetch and wheel download (`upstream/mirror.py`), pip and uv (`upstream/pip.py`), a base image pull
(`engine/client.py`), the skeleton's mmdebstrap (`builder/skeleton.py`). What is cached is used as online; what is not
is an OfflineError naming it and the command that fetches it while online. The build itself (BuildKit) reads only
local images: imgbuild's Dockerfiles name no `# syntax=` frontend and bases come from the local store.
"""

from __future__ import annotations

import os

from imgbuild.errors import OfflineError

ENV = "IMGBUILD_OFFLINE"


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def enable() -> None:
    os.environ[ENV] = "1"


def refuse(missing: str, fetch: str) -> None:
    """Raise an OfflineError when offline: `missing` is what the cache lacks, `fetch` how to get it online."""
    if enabled():
        raise OfflineError(
            f"offline: {missing}, and fetching it needs the network (nothing was fetched)",
            hint=f"while online: {fetch}; then the offline build finds it in the cache",
        )
