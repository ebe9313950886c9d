"""The engine's reads over the local socket (images/engine_api.py) on the real daemon: they answer what
the docker SDK answers, a no-op build loads no SDK, and a missing, moved or changed image still rebuilds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest
import yaml

from imgbuild.images import engine_api
from imgbuild.images.docker import Engine
from tests.docker.conftest import Built, MakeProject
from tests.support.runner import Cli

pytestmark = pytest.mark.docker

# Runs `imgbuild ARGS` in-process, then names every module it loaded (loaded, not only named: a
# lazy module is in sys.modules before it loads, and its submodules only after).
LOADED = (
    "import runpy, sys\n"
    "sys.argv = ['imgbuild', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('imgbuild', run_name='__main__')\n"
    "except SystemExit as exc:\n"
    "    print('exit', exc.code, file=sys.stderr)\n"
    "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
)


def socket_engine() -> Engine:
    engine = Engine.connect()
    if engine_api.local_socket() is None:
        pytest.skip("DOCKER_HOST is not a local unix socket: everything goes through the SDK")
    assert engine._api is not None, "a local daemon answered, so reads go over its socket"
    return engine


def test_socket_reads_agree_with_the_sdk(built: Built) -> None:
    fast = socket_engine()
    sdk = Engine(docker.from_env(version="auto"), "docker")  # no socket reader: the SDK for everything
    for ref in (f"{built.repo}:latest", f"{built.repo}:engram-mem", f"{built.repo}:absent"):
        assert fast.image(ref) == sdk.image(ref), ref
    assert fast.image(f"{built.repo}:absent") is None
    assert fast.features == sdk.features and fast.arch == sdk.arch
    # this session's upstream: only its images carry it (the daemon is shared with other runs)
    url = fast.require(f"{built.repo}:latest").labels["imgbuild.upstream.url"]
    found = sorted(i.id for i in fast.labelled("imgbuild.upstream.url", url))
    assert found and found == sorted(i.id for i in sdk.labelled("imgbuild.upstream.url", url))
    assert fast._client is None, "no read above needed the SDK"


def test_remembered_answers_are_dropped_when_this_engine_changes_the_store(built: Built, engine: Engine) -> None:
    mine = Engine.connect()
    ref = f"{built.repo}:remembered"
    latest = mine.require(f"{built.repo}:latest")
    try:
        with mine.remembering():
            assert mine.image(ref) is None
            engine.tag(latest.id, ref)  # another Engine (as another process): kept answers stay until a change here
            assert mine.image(ref) is None
            mine.tag(latest.id, ref)
            found = mine.image(ref)
            assert found is not None and found.id == latest.id
            mine.untag(ref)
            assert mine.image(ref) is None
        engine.tag(latest.id, ref)
        outside = mine.image(ref)  # outside `remembering` every call asks the engine
        assert outside is not None and outside.id == latest.id
    finally:
        engine.untag(ref)


def test_a_dead_socket_reads_as_the_sdk_words_it(tmp_path: Path) -> None:
    api = engine_api.EngineApi(str(tmp_path / "none.sock"))
    assert not api.ping()
    with pytest.raises(engine_api.Unanswered):
        api.inspect_image("x:y")


def test_noop_build_loads_no_docker_sdk(built: Built) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LOADED, "-C", str(built.project), "build", "--base", "skeleton"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "IMGBUILD_CACHE": str(built.cache)},
    )
    assert "exit 0" in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("reused (no docker build)") == 4, proc.stderr[-3000:]  # two layers, two images
    loaded = set(proc.stderr.strip().splitlines()[-1].split())
    assert not {"docker.api", "docker.client", "requests.adapters", "urllib3.connectionpool"} & loaded


def ids(engine: Engine, repo: str) -> dict[str, str]:
    return {t: i.id for t in (f"{repo}:latest", f"{repo}:engram-mem") if (i := engine.image(t)) is not None}


def test_missing_moved_or_changed_images_still_rebuild(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str
) -> None:
    root = make_project("sock")
    repo = f"{prefix}-sock"
    build = ("build", "latest", "engram-mem", "--base", "skeleton")
    assert cli(root, *build).returncode == 0
    first = ids(engine, repo)
    assert set(first) == {f"{repo}:latest", f"{repo}:engram-mem"}

    engine.untag(f"{repo}:engram-mem")  # a missing image: put back
    proc = cli(root, *build)
    assert proc.returncode == 0, proc.stderr
    assert ids(engine, repo) == first, proc.stderr

    engine.tag(first[f"{repo}:engram-mem"], f"{repo}:latest")  # a stale moving tag: moved back
    proc = cli(root, *build)
    assert proc.returncode == 0, proc.stderr
    assert ids(engine, repo) == first, proc.stderr

    images = root / "images" / "latest.yaml"
    body = yaml.safe_load(images.read_text())
    body["image"]["env"]["DSV41_ENGRAM_DISK"] = "2"
    images.write_text(yaml.safe_dump(body))
    proc = cli(root, *build)  # changed inputs: both images are new
    assert proc.returncode == 0, proc.stderr
    now = ids(engine, repo)
    assert now[f"{repo}:latest"] != first[f"{repo}:latest"], proc.stderr
    assert "DSV41_ENGRAM_DISK=2" in engine.require(f"{repo}:latest").env
