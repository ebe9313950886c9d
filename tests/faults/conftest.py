"""Fixtures for the fault tier: the docker tier's engine and session prefix, and a sleeping image.

Faults are injected for real (pid namespaces, a failing registry, SIGKILL, a full file system); nothing here
stops, restarts or reconfigures the host's dockerd.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from imgbuild.engine import Engine
from tests.docker.conftest import (  # noqa: F401 - the docker tier's fixtures, shared
    engine,
    make_project,
    prefix,
    skeleton_base,
    synth_upstream,
)
from tests.support.sleep_image import make_sleep_image


@pytest.fixture(scope="module")
def sleep_image(engine: Engine, tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Iterator[str]:  # noqa: F811
    ref = make_sleep_image(engine, tmp_path_factory.mktemp("sleep"), f"{prefix}-sleep", "faults")
    yield ref
    engine.client.api.remove_image(ref, force=True)
