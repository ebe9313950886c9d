"""The engine's image calls over the local socket (images/engine_api.py) on the real daemon: they answer what
the docker SDK answers, a no-op build and a config-only one load no SDK, a failed load names what the daemon
said, and a missing, moved or changed image still rebuilds."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import docker
import pytest
import yaml

from imgbuild.errors import DockerError
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
            assert mine.image(found.id) is found  # found by name: its id is not asked about again
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


SDK_MODULES = {"docker.api", "docker.client", "requests.adapters", "urllib3.connectionpool"}


def loaded_modules(built: Built, *args: str) -> tuple[str, set[str]]:
    """`imgbuild -C PROJECT ARGS` in a fresh process with IMGBUILD_ECHO=1: its stderr, and the modules it loaded."""
    proc = subprocess.run(
        [sys.executable, "-c", LOADED, "-C", str(built.project), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "IMGBUILD_CACHE": str(built.cache), "IMGBUILD_ECHO": "1"},
    )
    assert "exit 0" in proc.stderr, proc.stderr[-3000:]
    return proc.stderr, set(proc.stderr.strip().splitlines()[-1].split())


def test_noop_build_loads_no_docker_sdk(built: Built) -> None:
    stderr, loaded = loaded_modules(built, "build", "--base", "skeleton")
    assert stderr.count("reused (no docker build)") == 4, stderr[-3000:]  # two layers, two images
    assert not SDK_MODULES & loaded


def test_config_only_build_loads_no_docker_sdk(built: Built, engine: Engine) -> None:
    mem = engine.require(f"{built.repo}:engram-mem")
    immutable = next(t for t in mem.tags if t != f"{built.repo}:engram-mem")
    engine.untag(immutable)  # latest is there: engram-mem is written as a config-only image and loaded
    stderr, loaded = loaded_modules(built, "build", "engram-mem", "--no-smoke", "--base", "skeleton")
    assert f"+ imgbuild write-config-image {immutable} " in stderr and "+ docker load" in stderr, stderr[-3000:]
    assert " buildx build " not in stderr, stderr[-3000:]
    assert not SDK_MODULES & loaded
    assert engine.require(immutable).id == mem.id  # the same image as before, under its name again


def lost_layer_archive(name: str) -> bytes:
    """An OCI archive of one image under `name` whose only layer is in neither the archive nor the store."""
    lost = "sha256:" + hashlib.sha256(b"imgbuild: a layer nobody has").hexdigest()
    config = json.dumps({"architecture": "arm64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [lost]}})
    config_digest = hashlib.sha256(config.encode()).hexdigest()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": f"sha256:{config_digest}",
                "size": len(config),
            },
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": lost, "size": 1024}],
        }
    )
    manifest_digest = hashlib.sha256(manifest.encode()).hexdigest()
    top = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": f"sha256:{manifest_digest}",
        "size": len(manifest),
        "platform": {"architecture": "arm64", "os": "linux"},
        "annotations": {"io.containerd.image.name": f"docker.io/{name}", "org.opencontainers.image.ref.name": "lost"},
    }
    files = {
        "oci-layout": '{"imageLayoutVersion": "1.0.0"}',
        "index.json": json.dumps({"schemaVersion": 2, "manifests": [top]}),
        f"blobs/sha256/{config_digest}": config,
        f"blobs/sha256/{manifest_digest}": manifest,
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, text in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


def test_a_failed_load_names_what_the_daemon_said(engine: Engine, prefix: str) -> None:
    if not engine.features.containerd_store:
        pytest.skip("an OCI archive with a missing layer is the containerd image store's case")
    fast = socket_engine()
    sdk = Engine(docker.from_env(version="auto"), "docker")
    ref = f"{prefix}-lostlayer:lost"
    try:
        said = []
        for eng in (fast, sdk):
            with pytest.raises(DockerError, match=r"docker load failed: .*content digest sha256:\w+: not found") as exc:
                eng.load(io.BytesIO(lost_layer_archive(ref)))  # what _load_layout's fallback looks for
            said.append(exc.value.message)
        assert said[0] == said[1]
        with pytest.raises(DockerError, match="docker load failed: unexpected EOF"):
            fast.load(io.BytesIO(b"not a tar"))
        assert fast._client is None, "the socket answered every load above"
    finally:
        engine.untag(ref)


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
