from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.synth import Upstream


@pytest.fixture(autouse=True)
def _isolated_cache(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every test gets its own cache, except release tests, which share the user's
    cache so the real release is downloaded once."""
    if request.node.get_closest_marker("release") is None:
        monkeypatch.setenv("IMGBUILD_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("IMGBUILD_PROJECT", raising=False)
    monkeypatch.delenv("CI", raising=False)
    yield


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream")
