"""Builds on the real engine: config, arch, file states, shared layers, skip and force."""

from __future__ import annotations

import json

import pytest

from imgbuild.engine import Engine
from imgbuild.platforms import Platform
from tests.docker.conftest import Built, MakeProject
from tests.support.jsonschema_check import load_json
from tests.support.layer_agreement import from_bake, from_plan
from tests.support.runner import Cli
from tests.support.synth_images import ENGRAM, SM121

ARM64 = Platform.parse("linux/arm64")
pytestmark = pytest.mark.docker


def tags_of(engine: Engine, repo: str) -> dict[str, str]:
    return {t: img.id for img in engine.client.images.list(name=repo) for t in img.tags if t.startswith(f"{repo}:")}


def test_config_is_arm64_with_cleared_entrypoint_and_cmd(built: Built, engine: Engine) -> None:
    for tag in ("latest", "engram-mem"):
        info = engine.require(f"{built.repo}:{tag}")
        assert (info.os, info.arch) == ("linux", "arm64")
        assert not info.entrypoint and not info.cmd  # BuildKit stores `ENTRYPOINT []` as null
        assert info.labels["imgbuild.variant"] == tag
        assert info.labels["org.opencontainers.image.created"] == "2026-11-01T00:00:00Z"
        immutable = f"{built.repo}:1.0.0-{info.labels['imgbuild.inputs'][:12]}"
        assert engine.require(immutable).id == info.id
    assert "DSV41_ENGRAM_DISK=1" in engine.require(f"{built.repo}:latest").env
    assert not any(e.startswith("DSV41_ENGRAM_DISK") for e in engine.require(f"{built.repo}:engram-mem").env)


def test_layers_are_shared_byte_for_byte(built: Built, engine: Engine, skeleton_base: str) -> None:
    base = engine.require(skeleton_base).layers
    mem = engine.require(f"{built.repo}:engram-mem").layers
    latest = engine.require(f"{built.repo}:latest").layers
    assert mem[: len(base)] == base and len(mem) == len(base) + 1  # base + the shared sm121 layer
    assert latest[: len(mem)] == mem and len(latest) == len(mem) + 1  # that same layer + the engram layer


def test_the_built_images_have_the_layers_plan_and_the_bake_file_give_them(built: Built, engine: Engine) -> None:
    """One layer-sharing decision (plan/layers.py): what `build --base skeleton` made, `plan` and the bake file say."""
    assert built.cli("bake").returncode == 0
    planned = from_plan(built.project)
    assert from_bake(built.project) == planned and len(planned["latest"]) == 2
    for tag in ("latest", "engram-mem"):
        assert tuple(json.loads(engine.require(f"{built.repo}:{tag}").labels["imgbuild.layers"])) == planned[tag]


def test_file_state_matrix_read_from_the_images(built: Built, engine: Engine) -> None:
    states = {}
    for tag in ("latest", "engram-mem"):
        proc = built.cli("smoke", f"{built.repo}:{tag}", "--static", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (report,) = load_json(proc.stdout)["reports"]
        assert report["ok"] and [c for c in report["checks"] if c["status"] != "pass"] == []
        states[tag] = {f["path"]: f["actual"] for f in report["files"]}
    assert states["latest"] == dict.fromkeys((*SM121, *ENGRAM), "patched")
    assert states["engram-mem"] == {**dict.fromkeys(SM121, "patched"), **dict.fromkeys(ENGRAM, "original")}
    text = built.cli("smoke", f"{built.repo}:engram-mem", "--static").stdout
    assert "image x file" in text and " 0 failed, 0 skipped" in text, text
    patches = json.loads(engine.require(f"{built.repo}:engram-mem").labels["imgbuild.patches"])
    assert patches["0003-engram"] == "reverted"  # what `docker image inspect` shows of the patches


def test_unchanged_inputs_are_reused_without_any_build(built: Built, engine: Engine) -> None:
    before = tags_of(engine, built.repo)
    proc = built.cli("build", "--base", "skeleton", env={"IMGBUILD_ECHO": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "buildx build" not in proc.stderr, proc.stderr
    assert proc.stderr.count("reused (no docker build)") == 2, proc.stderr  # the two images
    assert tags_of(engine, built.repo) == before, (before, proc.stderr)


def test_an_unchanged_build_is_answered_from_its_receipt_as_the_build_would(
    built: Built, engine: Engine, skeleton_base: str
) -> None:
    """The fixture's build kept a receipt: the same build again reads only the engine, and prints the document the
    whole build prints; a moving tag moved since then sends it through the whole build, which moves it back, and a
    foreign image under a moving tag is refused as the whole build refuses it, with --no-smoke too."""
    again = ("build", "latest", "engram-mem", "--base", "skeleton", "--json")
    kept = built.cli(*again, env={"IMGBUILD_ECHO": "1"})
    assert kept.returncode == 0, kept.stderr
    assert "nothing changed since this build last ran" in kept.stderr, kept.stderr
    assert "buildx" not in kept.stderr and "docker run" not in kept.stderr, kept.stderr  # no build, no probe
    for receipt in (built.cache / "receipts").glob("*.json"):
        receipt.unlink()
    whole = built.cli(*again)
    assert whole.returncode == 0 and "nothing changed" not in whole.stderr, whole.stderr
    assert load_json(kept.stdout, expect="build") == load_json(whole.stdout, expect="build")

    latest, mem = engine.require(f"{built.repo}:latest"), engine.require(f"{built.repo}:engram-mem")
    engine.tag(mem.id, f"{built.repo}:latest")  # as a rollback to another image would leave it
    moved = built.cli(*again)
    assert moved.returncode == 0, moved.stderr
    assert "nothing changed" not in moved.stderr and "smoke-testing" in moved.stderr, moved.stderr
    assert engine.require(f"{built.repo}:latest").id == latest.id
    assert "nothing changed since this build last ran" in built.cli(*again).stderr  # kept again

    alone = ("build", "latest", "engram-mem", "--base", "skeleton", "--no-smoke")
    assert built.cli(*alone).returncode == 0  # its own receipt: --no-smoke is part of the key
    assert "nothing changed since this build last ran" in built.cli(*alone).stderr
    engine.tag(engine.require(skeleton_base).id, f"{built.repo}:engram-mem")  # not imgbuild's
    clash = built.cli(*alone)
    assert clash.returncode == 7 and "tag collision" in clash.stderr, clash.stderr
    engine.tag(mem.id, f"{built.repo}:engram-mem")


def test_smoke_variant_passes_and_its_json_has_every_check(built: Built) -> None:
    proc = built.cli("smoke", "latest", "engram-mem", "--base", "skeleton", "--json", env={"IMGBUILD_ECHO": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the plan names the images (builder/locate.py): nothing is built or pulled to learn where they are
    assert "buildx build" not in proc.stderr and "pulling" not in proc.stderr, proc.stderr
    doc = load_json(proc.stdout)  # what CI keeps; the schema asks each check's group, name, status, detail, seconds
    assert doc["ok"] is True and [r["variant"] for r in doc["reports"]] == ["latest", "engram-mem"]
    checks = [c for r in doc["reports"] for c in r["checks"]]
    assert not [c for c in checks if c["status"] == "fail"]
    names = {c["name"] for c in checks}
    assert {"entrypoint", "cmd", "layers", "env", "labels", "run-directly", "compile vllm/attention.py"} <= names
    # per variant: `import vllm` and the import checks, both needing torch
    assert sum(1 for c in checks if c["status"] == "skip") == 4
    assert {c["status"] for c in checks if c["name"] == "python3 -c 'import vllm'"} == {"skip"}  # on the skeleton


def test_skeleton_json_names_the_stand_in_in_the_store(built: Built, engine: Engine) -> None:
    proc = built.cli("skeleton", "--json", env={"IMGBUILD_ECHO": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load_json(proc.stdout, expect="skeleton")
    assert engine.require(doc["tag"]).id == doc["image_id"] and doc["platform"] == "linux/arm64"
    assert doc["upstreams"] and doc["upstream_commit"] == doc["upstreams"][0]["commit"]
    assert "buildx build" not in proc.stderr, proc.stderr  # the build made it: it is there


def test_build_one_variant_first_then_latest_shares_its_layer(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str
) -> None:
    project = make_project("order")
    repo = f"{prefix}-order"
    first = cli(project, "build", "engram-mem", "--base", "skeleton")
    assert first.returncode == 0, first.stderr
    assert not [t for t in tags_of(engine, repo) if ":layer-" in t]  # no layer images: BuildKit's cache holds them
    second = cli(project, "build", "latest", "--base", "skeleton")
    assert second.returncode == 0, second.stderr
    mem, latest = engine.require(f"{repo}:engram-mem"), engine.require(f"{repo}:latest")
    assert latest.layers[: len(mem.layers)] == mem.layers


def test_force_rebuilds_and_keeps_sharing(make_project: MakeProject, cli: Cli, engine: Engine, prefix: str) -> None:
    project = make_project("force")
    repo = f"{prefix}-force"
    assert cli(project, "build", "--base", "skeleton", "--no-smoke").returncode == 0
    proc = cli(project, "build", "--base", "skeleton", "--force", "--no-smoke")
    assert proc.returncode == 0, proc.stderr
    assert "reused" not in proc.stderr and proc.stderr.count("building") == 2
    assert "moving tags left alone" in proc.stderr
    # no BuildKit cache either: the shared layer is made twice, byte for byte the same (timestamps rewritten)
    assert "its bottom" in proc.stdout and "layers are engram-mem's, byte for byte" in proc.stdout, proc.stdout
    assert f"{repo}:latest" not in tags_of(engine, repo)  # never smoked, never moved


def test_site_packages_is_asked_from_the_base_when_not_configured(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str, skeleton_base: str
) -> None:
    from imgbuild.plan.dockerfile import context_tar

    base = f"{prefix}-nolabel/base:1"
    engine.build(
        context_tar(f'FROM {skeleton_base}\nLABEL imgbuild.site-packages=""\n', {}),
        tags=[base],
        platforms=[ARM64],
        epoch=0,
    )
    project = make_project("probe")
    text = (project / "images" / "latest.yaml").read_text().replace("site_packages:", "# site_packages:")
    (project / "images" / "latest.yaml").write_text(text)
    proc = cli(project, "build", "latest", "--base", base, "--no-smoke")
    assert proc.returncode == 0, proc.stderr
    assert "vllm/ lives in /usr/local/lib/python3.12/dist-packages" in proc.stderr


def test_platform_is_configurable_amd64(make_project: MakeProject, cli: Cli, engine: Engine, prefix: str) -> None:
    project = make_project("amd64")
    proc = cli(project, "build", "latest", "--base", "skeleton", "--platform", "linux/amd64")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    info = engine.require(f"{prefix}-amd64:latest")
    assert info.arch == "amd64" and not info.entrypoint
    # the skeleton has no registry origin: no OCI base.name or base.digest (its local id, also its repo digest
    # on the containerd store, is no registry's); imgbuild.base names it in this store
    assert "org.opencontainers.image.base.name" not in info.labels
    assert "org.opencontainers.image.base.digest" not in info.labels
    assert engine.require(info.labels["imgbuild.base"]).arch == "amd64"
