from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import daemon_watch
from tests.support.cleanup import drop_large
from tests.support.runner import Cli, imgbuild
from tests.support.synth import Upstream

TIERS = ("docker", "release")
HERE = Path(__file__).resolve().parent
# tests/docker/ and tests/release/ hold only tests of their tier (checked below), so with the
# tier off they are not even imported: that is 2.5 s of the fast tier's 5 s of collection.
FOLDERS = {HERE / "docker": "docker", HERE / "release": "release"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("imgbuild tiers")
    group.addoption("--docker", action="store_true", help="also run tests that need the Docker engine and registry")
    group.addoption("--release", action="store_true", help="also run tests on the real pinned vLLM release")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    tier = FOLDERS.get(collection_path)
    if tier is not None and not config.getoption(f"--{tier}"):
        return True
    # tests/gpu/ runs with `-m gpu` (README); anywhere else its conftest's torch import is 1.3 s for a skip
    if collection_path == HERE / "gpu" and "gpu" not in (config.getoption("markexpr") or ""):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Default `pytest` stays fast: tier-marked tests are deselected unless asked for."""
    enabled = {t for t in TIERS if config.getoption(f"--{t}")}
    for item in items:
        for folder, tier in FOLDERS.items():
            if item.path.is_relative_to(folder) and item.get_closest_marker(tier) is None:
                raise pytest.UsageError(
                    f"{item.nodeid}: a test in tests/{folder.name}/ must be marked {tier} "
                    f"(pytestmark = pytest.mark.{tier}), or it would not run without --{tier}; mark it or move it"
                )
    keep, drop = [], []
    for item in items:
        tiers = {t for t in TIERS if item.get_closest_marker(t)}
        (keep if tiers <= enabled else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def _daemon_survives(request: pytest.FixtureRequest) -> Iterator[None]:
    """With --docker: a test during which dockerd died stops the session, naming the test and the daemon's
    last log lines, instead of every later docker test failing on an unreachable daemon."""
    pid = daemon_watch.dockerd_pid() if request.config.getoption("--docker") else None
    since = daemon_watch.log_size() if pid else 0
    yield
    if pid and daemon_watch.dockerd_pid() != pid:
        words = daemon_watch.last_words(since)
        pytest.exit(f"dockerd (pid {pid}) died during {request.node.nodeid}; its log:\n{words}", returncode=3)


@pytest.fixture(autouse=True)
def _isolated_cache(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every test gets its own cache, except release tests, which share the user's
    cache so the real release is downloaded once.

    After the test, the large parts of its own cache, and of the caches and registries
    it made in its tmp_path, are removed (tests/support/cleanup.py); the rest stays for
    a post-mortem."""
    own = None
    if request.node.get_closest_marker("release") is None:
        own = tmp_path_factory.mktemp("cache")
        monkeypatch.setenv("IMGBUILD_CACHE", str(own))
    tmp = request.getfixturevalue("tmp_path") if own and "tmp_path" in request.fixturenames else None
    monkeypatch.delenv("IMGBUILD_PROJECT", raising=False)
    monkeypatch.delenv("CI", raising=False)
    yield
    if own is not None:
        drop_large(own)
    if tmp is not None and tmp.is_dir():
        for made in tmp.iterdir():
            if made.is_dir() and not made.is_symlink():
                drop_large(made)


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def cli() -> Cli:
    """`cli(PROJECT, *ARGS, env=...)`: the command in a subprocess (tests/support/runner.py), for every tier."""
    return imgbuild
