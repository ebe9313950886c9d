"""`build --offline`: the cache or an error naming what to fetch; never a fetch (the mirror's is refused first)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgbuild import offline
from imgbuild.errors import ExitCode, OfflineError
from tests.support.runner import imgbuild
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release


def test_offline_plans_from_the_cache_or_names_what_to_fetch(tmp_path: Path, upstream: Upstream) -> None:
    release(upstream)
    project = engram_project(tmp_path / "p", upstream, "vllm-test")
    env = {"IMGBUILD_CACHE": str(tmp_path / "cache"), "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    args = ["build", "latest", "--dry-run", "--base", "base:1", "--json"]

    cold = imgbuild(project, *args, "--offline", env=env)
    error = json.loads(cold.stdout)["error"]
    assert cold.returncode == ExitCode.OFFLINE == error["exit_code"], cold.stderr
    assert error["type"] == "OfflineError"
    assert f"of {upstream.url} is not in the cache mirror" in error["message"], error
    assert "nothing was fetched" in error["message"] and "without --offline" in error["hint"], error
    fetched = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and "/objects/" in str(p)]
    assert fetched == []  # the mirror got nothing

    online = imgbuild(project, *args, env=env)  # fetches the release into the cache
    assert online.returncode == 0, online.stderr
    warm = imgbuild(project, *args, "--offline", env=env)
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout) == json.loads(online.stdout)  # the same plan, from the cache alone
    assert "fetching" in online.stderr and "fetching" not in warm.stderr
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and "/objects/" in str(p)]  # now it has it


def test_the_switch_is_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(offline.ENV, raising=False)
    offline.refuse("x", "y")  # online: nothing to refuse
    monkeypatch.setenv(offline.ENV, "1")
    with pytest.raises(OfflineError, match="offline: x, and fetching it needs the network") as err:
        offline.refuse("x", "fetch y")
    assert err.value.hint == "while online: fetch y; then the offline build finds it in the cache"
