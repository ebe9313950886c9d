"""`Engine`: the client (engine/client.py) with builds (engine/build.py) and containers (engine/containers.py);
what every command that needs the engine gets from `Engine.connect`."""

from __future__ import annotations

from typing import Self

from imgbuild.engine.build import Builds
from imgbuild.engine.containers import Containers


class Engine(Builds, Containers):
    """The Docker engine: images (inspect, tag, pull), builds (buildx) and containers (run, read files)."""

    @classmethod
    def connect(cls) -> Self:
        """The local engine, checked (Docker 26+, containerd image store), with the containers a killed imgbuild
        left removed."""
        engine = super().connect()
        engine.remove_leftovers()
        return engine
