"""The one door to the docker CLI: `run_cli` resolves it (IMGBUILD_DOCKER, default `docker`) and runs it through
proc.run, which echoes it under IMGBUILD_ECHO=1. Builds (`engine/build.py`) and the registry (`registry/tools.py`)
go through it; each maps proc's ToolNotFound and ToolTimeout to its own error (DockerError, RegistryError).
Nothing here imports the docker SDK: `registry/` and `plan/` import this module."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from imgbuild import proc


def docker_cli() -> str:
    """The docker CLI to run: $IMGBUILD_DOCKER, else `docker` on PATH."""
    return os.environ.get("IMGBUILD_DOCKER") or "docker"


def run_cli(args: Sequence[str], **kwargs: Any) -> proc.CompletedProcess[Any]:
    """`docker ARGS` through proc.run (its keywords: text, input, env, capture, timeout)."""
    return proc.run([docker_cli(), *args], **kwargs)
