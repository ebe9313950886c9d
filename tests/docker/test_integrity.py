"""An image changed after the build fails `smoke` (and `smoke --static`, which runs nothing), naming the layer
or the key."""

from __future__ import annotations

import io
import tarfile

import pytest

from imgbuild.engine import Engine
from imgbuild.plan.dockerfile import context_tar
from imgbuild.platforms import Platform
from tests.docker.conftest import Built
from tests.support.jsonschema_check import load_json
from tests.support.synth_images import SITE

ARM64 = Platform.parse("linux/arm64")
pytestmark = pytest.mark.docker


def committed(engine: Engine, image: str, tag: str, path: str, data: bytes) -> str:
    """`docker commit` of a container whose `path` was edited (put in place without starting it: no qemu)."""
    container = engine.client.containers.create(image, command=["true"], platform="linux/arm64")
    try:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(path.rsplit("/", 1)[1])
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        assert container.put_archive(path.rsplit("/", 1)[0], buf.getvalue())
        repo, _, name = tag.rpartition(":")
        container.commit(repository=repo, tag=name)
    finally:
        container.remove(force=True)
    return tag


def failing(proc_stdout: str) -> dict[str, str]:
    return {
        c["name"]: c["detail"] for r in load_json(proc_stdout)["reports"] for c in r["checks"] if c["status"] == "fail"
    }


def test_a_committed_image_fails_smoke_static_and_smoke(built: Built, engine: Engine) -> None:
    latest = f"{built.repo}:latest"
    (clean,) = load_json(built.cli("smoke", latest, "--static", "--json").stdout)["reports"]
    assert clean["ok"] and [c for c in clean["checks"] if c["status"] != "pass"] == [], clean  # none skipped
    checks = {c["name"]: c for c in load_json(built.cli("smoke", latest, "--json").stdout)["reports"][0]["checks"]}
    assert checks["layers"]["status"] == "pass" and "counted" not in checks["layers"]["detail"], checks["layers"]
    assert checks["env"]["status"] == checks["labels"]["status"] == "pass"
    top = len(engine.require(latest).layers)
    tag = committed(engine, latest, f"{built.repo}:committed", f"{SITE}/vllm/__init__.py", b"__version__ = 'x'\n")

    proc = built.cli("smoke", tag, "--static", "--json")
    assert proc.returncode == 8
    (report,) = load_json(proc.stdout)["reports"]
    assert report["files"] and all(f["ok"] for f in report["files"])  # the seven files are untouched
    fails = failing(proc.stdout)
    assert set(fails) == {"layers", "cmd"}, fails  # the container's command, kept as CMD (below)
    assert f"layer {top} (" in fails["layers"] and "neither the base's nor imgbuild's" in fails["layers"]

    proc = built.cli("smoke", tag, "--json")
    assert proc.returncode == 8
    fails = failing(proc.stdout)
    # the commit also keeps the container's command as CMD, which launchers would then run
    assert set(fails) == {"layers", "cmd"} and f"layer {top} (" in fails["layers"], fails
    assert "CMD is ['true']" in fails["cmd"]


def test_a_changed_label_or_env_fails_smoke_static_and_smoke(built: Built, engine: Engine) -> None:
    latest = f"{built.repo}:latest"
    labels = 'org.opencontainers.image.title="edited" org.opencontainers.image.description="x"'
    text = f"FROM {latest}\nLABEL {labels}\nENV DSV41_ENGRAM_DISK=0 EXTRA=1\n"
    tag = f"{built.repo}:relabelled"
    engine.build(context_tar(text, {}), tags=[tag], platforms=[ARM64], epoch=0)
    assert engine.require(tag).layers == engine.require(latest).layers  # metadata only: no layer to catch

    proc = built.cli("smoke", tag, "--static", "--json")
    assert proc.returncode == 8
    found = "\n".join(failing(proc.stdout).values())
    assert "ENV DSV41_ENGRAM_DISK: image has '0', plan says '1'" in found
    assert "ENV EXTRA='1': not in the plan (nor the base)" in found
    assert "label org.opencontainers.image.title: changed after the build" in found  # a label imgbuild set
    assert "label org.opencontainers.image.description: image has 'x', the base 'imgbuild skeleton" in found

    fails = failing(built.cli("smoke", tag, "--json").stdout)
    assert set(fails) == {"env", "labels"}, fails
    assert "'edited'" in fails["labels"] and "DSV41_ENGRAM_DISK" in fails["env"]
