"""`imgbuild history` and `rollback` on a project built twice (a patch's header edited between the builds), with the
real engine and a real registry: the labels are the source, a refused or failing target moves nothing, and the
registry's moving tag is moved keeping the digest."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from imgbuild.engine import Engine
from imgbuild.registry import tools
from tests.docker.conftest import MakeProject, run_cli
from tests.support.jsonschema_check import load_json
from tests.support.registry_env import RegistryProcess, remove_images

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]


def _json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return load_json(proc.stdout)


def _docker(*args: str) -> None:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_history_and_rollback_locally_and_in_a_registry(
    make_project: MakeProject, engine: Engine, prefix: str, skeleton_base: str, tmp_path: Path
) -> None:
    project = make_project("hist")
    repo = f"{prefix}-hist"
    env = {"IMGBUILD_CACHE": str(tmp_path / "cache")}
    patch = project / "patches" / "0001-attn.patch"
    for n in range(2):
        if n:  # another input: the patch's description, so the series digest (and the inputs) change
            text = re.sub(r"^Description: .*$", "Description: attention, again", patch.read_text(), count=1, flags=re.M)
            patch.write_text(text)
        proc = run_cli(project, "build", "latest", "--base", "skeleton", env=env)
        assert proc.returncode == 0, proc.stderr + proc.stdout

    hist = _json(run_cli(project, "history", "latest", "--json", env=env))
    entries = hist["entries"]
    assert len(entries) == 2 and len({e["inputs"] for e in entries}) == 2 and len({e["series"] for e in entries}) == 2
    newest, older = entries
    assert hist["moving"] == {f"{repo}:latest": newest["image_id"]}  # newest first
    assert newest["moving"] == [f"{repo}:latest"] and older["moving"] == []
    for e in entries:  # what the labels say, and the smoke test build ran
        assert e["kind"] == "image" and e["platforms"] == {"linux/arm64": e["image_id"]}
        assert e["upstreams"][0]["tag"] == "v1.0.0" and len(e["upstreams"][0]["commit"]) == 40
        assert e["patches"] == {"0001-attn": "applied", "0002-sparse": "applied", "0003-engram": "applied"}
        assert e["base"]["name"].endswith(skeleton_base.rpartition("/")[2]) and e["smoke"] == "passed"
        assert engine.require(e["ref"]).labels["imgbuild.inputs"] == e["inputs"]
    text = run_cli(project, "history", "latest", env=env)
    assert f"{repo}:latest -> {newest['ref']}" in text.stdout and "smoke     passed" in text.stdout, text.stdout

    # refused, nothing moves: an image without imgbuild's labels, another variant's image, a failing smoke test
    stranger = f"{repo}:stranger"
    engine.tag(engine.require(skeleton_base).id, stranger)
    refused = run_cli(project, "rollback", "latest", "--to", "stranger", "--json", env=env)
    assert refused.returncode == 2 and "no imgbuild labels" in load_json(refused.stdout)["error"]["message"]
    other = run_cli(project, "build", "engram-mem", "--base", "skeleton", "--no-smoke", env=env)
    assert other.returncode == 0, other.stderr
    mem = _json(run_cli(project, "history", "engram-mem", "--json", env=env))["entries"][0]
    assert mem["smoke"] == "unknown"  # built with --no-smoke: no record
    refused = run_cli(project, "rollback", "latest", "--to", mem["ref"], "--json", env=env)
    assert refused.returncode == 2 and "variant engram-mem, not latest" in load_json(refused.stdout)["error"]["message"]
    spec = project / "images" / "latest.yaml"
    good = spec.read_text()
    data = yaml.safe_load(good)
    data["smoke"]["skeleton_commands"] = ["python3 -c 'raise SystemExit(3)'"]
    spec.write_text(yaml.safe_dump(data))
    failing = run_cli(project, "rollback", "latest", "--to", older["ref"], "--json", env=env)
    assert failing.returncode == 8, failing.stdout + failing.stderr
    assert "left unchanged" in load_json(failing.stdout)["error"]["message"]
    spec.write_text(good)
    assert engine.require(f"{repo}:latest").id == newest["image_id"]

    # a registry that has both builds under their immutable tags, `latest` on the newest (pushed by docker itself)
    registry = RegistryProcess.start(tmp_path / "registry")
    try:
        there = f"{registry.host}/{repo}"
        for e in entries:
            _docker("tag", e["ref"], f"{there}:{e['ref'].rpartition(':')[2]}")
            _docker("push", f"{there}:{e['ref'].rpartition(':')[2]}")
        _docker("tag", newest["ref"], f"{there}:latest")
        _docker("push", f"{there}:latest")
        seen = _json(run_cli(project, "history", "latest", "--registry", registry.host, "--json", env=env))
        assert [e["registry"]["digest"] for e in seen["entries"]] == [newest["image_id"], older["image_id"]]
        assert seen["entries"][0]["registry"]["moving"] == [f"{there}:latest"]

        # rollback: smoke-tested, moved locally and in the registry (digest kept), the recipe rewritten
        (project / "deploy").mkdir(exist_ok=True)
        shutil.copy(ROOT / "deploy" / "profiles.yaml", project / "deploy" / "profiles.yaml")
        made = _json(run_cli(project, "recipe", "latest", "--profile", "TP8-1M", "--out", str(tmp_path), "--json",
                             env=env))  # fmt: skip
        recipe = Path(made["recipe"])
        assert yaml.safe_load(recipe.read_text())["container"] == newest["ref"]
        args = ["rollback", "latest", "--to", older["image_id"], "--registry", registry.host, "--recipe", str(recipe)]
        rolled = run_cli(project, *args, "--json", env={**env, "IMGBUILD_ECHO": "1"})
        doc = _json(rolled)
        assert doc["smoked"] and all(r["ok"] for r in doc["smoke"]) and doc["target"]["ref"] == older["ref"]
        assert doc["moves"] == [{"ref": f"{repo}:latest", "from": newest["image_id"], "to": older["image_id"],
                                 "moved": True}]  # fmt: skip
        assert doc["registry_moves"][0]["to"] == older["image_id"] and doc["registry_moves"][0]["moved"]
        # one platform: the tag pushed again (no layer sent), since imagetools create would wrap it in a new list
        assert rolled.stderr.count("+ docker push ") == 1 and "imagetools create" not in rolled.stderr, rolled.stderr
        # IMGBUILD_ECHO: the engine's reads too, each as the docker command it amounts to
        for line in ("docker version", "docker info", "docker images --no-trunc --filter label=imgbuild.variant=latest",
                     f"docker image inspect {older['image_id']}", f"docker tag {older['image_id']} {repo}:latest",
                     "docker run --rm", "docker buildx imagetools inspect --raw"):  # fmt: skip
            assert f"+ {line}" in rolled.stderr, (line, rolled.stderr)
        assert engine.require(f"{repo}:latest").id == older["image_id"]
        found = tools.inspect(f"{there}:latest")
        assert found is not None and found.digest == older["image_id"]
        pinned = yaml.safe_load(recipe.read_text())
        assert pinned["container"] == f"{there}@{older['image_id']}" == doc["pinned"]
        assert pinned["metadata"]["imgbuild"]["profile"] == "TP8-1M"

        # forward again, locally only and without a smoke test: the recipes are printed, not written
        fwd = run_cli(project, "rollback", "latest", "--to", newest["ref"].rpartition(":")[2], "--no-smoke", env=env)
        assert fwd.returncode == 0, fwd.stderr
        assert f"moved from {older['image_id']} to {newest['ref']}" in fwd.stdout, fwd.stdout
        assert f"container: {newest['ref']}" in fwd.stdout and "not smoke-tested" in fwd.stdout
        assert engine.require(f"{repo}:latest").id == newest["image_id"]
    finally:
        registry.stop()
        remove_images(registry.host + "/")
