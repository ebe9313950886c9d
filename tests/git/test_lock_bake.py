"""images.lock and the bake file on a synthetic project (real git; no docker, no registry)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from imgbuild.builder.runner import project_inputs
from imgbuild.errors import RegistryError
from imgbuild.plan import bake as bakemod
from imgbuild.platforms import Platform
from imgbuild.project import Project
from imgbuild.registry import lock as lockmod
from tests.support.jsonschema_check import load_json
from tests.support.runner import imgbuild_here as imgbuild  # in-process: these test the commands, not the process
from tests.support.synth import Upstream
from tests.support.synth_images import SITE, engram_project, release

INDEX = "sha256:" + "1" * 64
ARM = "sha256:" + "2" * 64
AMD = "sha256:" + "3" * 64
BASE = "registry.example/vllm/vllm-openai:v1.0.0"


def fixed(platforms: tuple[tuple[str, str], ...] = (("linux/amd64", AMD), ("linux/arm64", ARM))) -> lockmod.LockedBase:
    found = tuple((Platform.parse(p), d) for p, d in platforms)
    return lockmod.LockedBase(BASE, INDEX, "application/vnd.oci.image.index.v1+json", found)


@pytest.fixture
def root(tmp_path: Path, upstream: Upstream) -> Path:
    release(upstream)
    return engram_project(tmp_path / "p", upstream, "vllm-dsv41", base=BASE)


def _lock(project: Project, base: lockmod.LockedBase | None = None) -> lockmod.ImagesLock:
    pin = project.pin
    got = base or fixed()
    return lockmod.make_lock(
        list(project.variants.values()), pin.tag, pin.commit, project.series_digest, resolve=lambda _ref: got
    )


def test_lock_round_trip_and_offline_check(root: Path) -> None:
    project = Project.load(root)
    lock = _lock(project)
    assert lockmod.write_lock(root, lock) is True
    assert lockmod.write_lock(root, lock) is False  # byte-equal: untouched
    text = (root / "images.lock").read_text()
    assert text.startswith("# images.lock") and project.pin.commit in text and project.series_digest in text
    again = lockmod.load_lock(root)
    assert again == lock
    assert (
        again is not None
        and again.bases[again.variants["engram-mem"].base].pinned(Platform.parse("linux/arm64")) == f"{BASE}@{ARM}"
    )
    pin = project.pin
    assert lockmod.check(again, list(project.variants.values()), pin.tag, pin.commit, project.series_digest, None) == []


def test_check_finds_every_kind_of_staleness(root: Path) -> None:
    project = Project.load(root)
    lock = _lock(project)
    pin, variants = project.pin, list(project.variants.values())
    assert lockmod.check(None, variants, pin.tag, pin.commit, project.series_digest, None) == [
        "images.lock is missing; run `imgbuild lock`"
    ]
    problems = lockmod.check(lock, variants, pin.tag, "f" * 40, "0" * 64, None)
    assert any(p.startswith("upstream:") for p in problems) and any(p.startswith("series:") for p in problems)
    moved = lockmod.LockedBase(BASE, "sha256:" + "9" * 64, lock.bases[BASE].media_type, lock.bases[BASE].platforms)
    problems = lockmod.check(lock, variants, pin.tag, pin.commit, project.series_digest, lambda _ref: moved)
    assert problems == [f"base {BASE}: locked {INDEX}, the registry now has {moved.digest}"]
    # a variant asks for a platform the lock does not have
    path = root / "images" / "latest.yaml"
    data = yaml.safe_load(path.read_text())
    data["image"]["platforms"] = ["linux/arm64", "linux/amd64"]
    path.write_text(yaml.safe_dump(data))
    arm_only = {BASE: fixed((("linux/arm64", ARM),))}
    arm_lock = lockmod.ImagesLock(lock.upstream_tag, lock.upstream_commit, lock.series, arm_only, lock.variants)
    project2 = Project.load(root)
    problems = lockmod.check(
        arm_lock, list(project2.variants.values()), pin.tag, pin.commit, project2.series_digest, None
    )
    assert "variant latest: locked platforms linux/arm64, images/ says linux/arm64, linux/amd64" in problems
    with pytest.raises(RegistryError, match="has no linux/amd64 image"):
        _lock(project2, fixed((("linux/arm64", ARM),)))


def test_lock_check_cli_without_a_lock_fails(root: Path) -> None:
    proc = imgbuild(root, "lock", "--check", "--offline")
    assert proc.returncode == 1
    assert "images.lock is missing" in proc.stderr
    # under --json the report is the one document on stdout (a failed check adds no error document)
    proc = imgbuild(root, "lock", "--check", "--offline", "--json")
    assert proc.returncode == 1 and "images.lock is missing" in proc.stderr
    assert load_json(proc.stdout) == {
        "schema": "imgbuild.lock-check/1",
        "ok": False,
        "problems": ["images.lock is missing; run `imgbuild lock`"],
    }


def _bake(root: Path) -> bakemod.Bake:
    project = Project.load(root)
    return bakemod.make_bake(project_inputs(project), project.plan(), lockmod.load_lock(root))


def test_bake_targets_share_the_first_layer(root: Path) -> None:
    lockmod.write_lock(root, _lock(Project.load(root)))
    bake = _bake(root)
    t = {x.variant: x for x in bake.targets}
    assert t["latest"].layers[:1] == t["engram-mem"].layers and len(t["latest"].layers) == 2
    assert t["latest"].locked and t["latest"].base == f"{BASE}@{INDEX}"
    doc = json.loads(bake.text)
    target = doc["target"]["engram-mem"]
    assert target["context"] == "buildkit/context" and target["platforms"] == ["linux/arm64"]
    assert target["args"]["BASE"] == f"{BASE}@{INDEX}"
    assert "FROM $${BASE}" in target["dockerfile-inline"]  # escaped for bake's templating
    layer = t["engram-mem"].layers[0]  # compiled by the base's python in a stage, then copied with its bytecode
    assert (
        f"FROM $${{BASE}} AS bytecode\nCOPY layers/{layer}/ /imgbuild-bytecode/{layer}/\n"
        in target["dockerfile-inline"]
    )
    assert f"COPY --from=bytecode /imgbuild-bytecode/{layer}/ {SITE}/" in target["dockerfile-inline"]
    assert target["tags"] == [
        f"${{REGISTRY}}/vllm-dsv41:{t['engram-mem'].immutable_tag}",
        "${REGISTRY}/vllm-dsv41:engram-mem",
    ]
    assert "type=provenance,disabled=true" in target["attest"]
    assert target["labels"]["imgbuild.inputs"] == t["engram-mem"].inputs_digest
    assert target["labels"]["org.opencontainers.image.base.digest"] == INDEX
    assert "DSV41_ENGRAM_DISK" in doc["target"]["latest"]["dockerfile-inline"]
    assert "DSV41_ENGRAM_DISK" not in target["dockerfile-inline"]
    names = sorted({p.split("/")[1] for p in bake.context})
    assert names == sorted(set(t["latest"].layers))


def test_bake_is_deterministic_and_check_catches_staleness(root: Path) -> None:
    first = _bake(root)
    assert _bake(root).text == first.text
    assert bakemod.check(root, first).problems == ["buildkit/docker-bake.json is missing"]
    assert bakemod.write_bake(root, first) and bakemod.write_context(root, first)
    assert bakemod.check(root, first).problems == [] and bakemod.check(root, first).ok
    assert not bakemod.write_bake(root, first) and not bakemod.write_context(root, first)
    ctx = root / bakemod.CONTEXT_DIR
    assert {p.stat().st_mtime for p in ctx.rglob("*")} == {0}
    # an edit to images/ makes the committed file stale
    path = root / "images" / "engram-mem.yaml"
    data = yaml.safe_load(path.read_text())
    data["image"]["labels"] = {"org.example.team": "spark"}
    path.write_text(yaml.safe_dump(data))
    proc = imgbuild(root, "bake", "--check")
    assert proc.returncode == 1 and "buildkit/docker-bake.json is out of date" in proc.stderr
    assert imgbuild(root, "bake").returncode == 0
    assert imgbuild(root, "bake", "--check").returncode == 0
    # a hand-edited context file is caught too
    victim = next(p for p in ctx.rglob("*.py"))
    victim.write_text("tampered\n")
    assert bakemod.check(root, _bake(root)).problems == [
        f"{bakemod.CONTEXT_DIR}/{victim.relative_to(ctx)}: content differs"
    ]
