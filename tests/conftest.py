from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import daemon_watch
from tests.support.cleanup import drop_large
from tests.support.runner import Cli, imgbuild
from tests.support.synth import Upstream

TIERS = ("docker", "release", "faults")
HERE = Path(__file__).resolve().parent
# tests/docker/, tests/release/ and tests/faults/ hold only tests of their tier (checked below), so with the
# tier off they are not even imported: that is 2.5 s of the fast tier's 5 s of collection.
FOLDERS = {HERE / "docker": "docker", HERE / "release": "release", HERE / "faults": "faults"}


# The one list of skips a run may report (CONTRIBUTING.md: tiers fail rather than skip). Everything a tier
# needs is required (tests/support/needs.py fails naming it and the set-up step); what stays a skip is a
# test documented as opt-in. `.ci/run` sets IMGBUILD_CHECK_SKIPS=1: the run then prints how many tests were
# skipped and fails if one is not listed here. Keys are node ids without their [parameters].
ALLOWED_SKIPS = {
    "tests/docker/test_runtime_base.py::test_arm64_base_imports_vllm_under_qemu_with_an_aarch64_cpuinfo": (
        "opt-in, slow (the arm64 runtime base under qemu): IMGBUILD_TEST_ARM64_RUNTIME=1"
    ),
}
CHECK_SKIPS = "IMGBUILD_CHECK_SKIPS"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("imgbuild tiers")
    group.addoption("--docker", action="store_true", help="also run tests that need the Docker engine and registry")
    group.addoption("--release", action="store_true", help="also run tests on the real pinned vLLM release")
    group.addoption(
        "--faults",
        action="store_true",
        help="also run the fault tier: real faults (a shared daemon, a failing registry, kill -9, a full disk)",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    tier = FOLDERS.get(collection_path)
    if tier is not None and not config.getoption(f"--{tier}"):
        return True
    # tests/gpu/ runs with `-m gpu` (CONTRIBUTING.md); anywhere else its conftest's torch import is 1.3 s for a skip
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
    """With --docker or --faults: a test during which dockerd died stops the session, naming the test and the daemon's
    last log lines, instead of every later docker test failing on an unreachable daemon."""
    on = request.config.getoption("--docker") or request.config.getoption("--faults")
    pid = daemon_watch.dockerd_pid() if on else None
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


def skipped(session: pytest.Session) -> list[tuple[str, str]]:
    """(node id, reason) of every skip this session reported, collection skips included."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    out = []
    for report in reporter.stats.get("skipped", []) if reporter is not None else []:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        out.append((report.nodeid, reason.removeprefix("Skipped: ")))
    return out


def allowed_skip(nodeid: str) -> str | None:
    """Why the test may be skipped (ALLOWED_SKIPS), or None."""
    return ALLOWED_SKIPS.get(nodeid.split("[", 1)[0])


def unseen_documents(session: pytest.Session) -> list[str] | None:
    """The documents (jsondoc.VERSIONS) no test printed and validated, for a whole run of every tier (no paths,
    -k or -m given, tests run: not --collect-only, which .ci/run does nested under act); None for any other run,
    which need not see them all."""
    from imgbuild import jsondoc
    from tests.support.jsonschema_check import SEEN

    config = session.config
    tiers = all(config.getoption(f"--{tier}") for tier in ("docker", "release", "faults"))
    whole = config.args_source != pytest.Config.ArgsSource.ARGS and not config.option.keyword
    if not (tiers and whole and not config.option.markexpr) or config.option.collectonly:
        return None
    return sorted(set(map(jsondoc.schema_id, jsondoc.VERSIONS)) - SEEN)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under IMGBUILD_CHECK_SKIPS=1 (.ci/run): say how many tests were skipped; a skip not in ALLOWED_SKIPS
    fails the run (exit 1), naming it. A whole run of every tier fails too when a --json document was never
    printed and validated (tests/support/jsonschema_check.py)."""
    if os.environ.get("IMGBUILD_DOCUMENTS_SEEN"):  # where to write the documents this run validated
        from tests.support.jsonschema_check import SEEN

        Path(os.environ["IMGBUILD_DOCUMENTS_SEEN"]).write_text("\n".join(sorted(SEEN)) + "\n")
    if os.environ.get(CHECK_SKIPS) != "1":
        return
    unseen = unseen_documents(session)
    if unseen:
        print(f"\nno test printed and validated: {', '.join(unseen)} (every --json document is tested)")
        if exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    skips = skipped(session)
    lines, refused = [], 0
    for nodeid, reason in skips:
        why = allowed_skip(nodeid)
        lines.append(f"  allowed: {nodeid}: {why}" if why else f"  NOT ALLOWED: {nodeid}: {reason}")
        refused += why is None
    title = f"{CHECK_SKIPS}: {len(skips)} skipped, {refused} not allowed (tests/conftest.py ALLOWED_SKIPS)"
    if refused:
        lines.append(
            "a tier that is asked for runs, or the run fails: make the test fail naming what it needs "
            "(tests/support/needs.py), or, for a documented opt-in test, add it to ALLOWED_SKIPS"
        )
        if exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        print("\n".join([title, *lines]))
        return
    reporter.ensure_newline()
    reporter.write_sep("=", title)
    for line in lines:
        reporter.write_line(line)
