"""sparkrun's own launch path, up to starting vLLM, on an imgbuild recipe: build through the plugin, then distribute.

sparkrun 0.4.2 runs in its venv (`.ci/setup-sparkrun.sh`, Python 3.12+) as a subprocess,
`tests/support/sparkrun_distribute.py`, which calls what `sparkrun build`/`run` call before the
runtime starts: `prepare_images` (the recipe's `builder: imgbuild`, found through the
`sparkrun.plugins` entry point, runs `imgbuild build --json` on a synthetic project, skeleton base)
and `stage_prepared_images` (its container distribution). The cluster is one "node": a second
dockerd (tests/support/node_daemon.py, own bridge, own containerd) behind a loopback sshd
(tests/support/sshd.py, `.ci/setup-sshd.sh`) whose logins talk to that dockerd; sparkrun reaches it
with its configured `ssh.options` (`-F` the test's ssh config). No distribution provider is enabled
here, so sparkrun takes its builtin `docker save | ssh docker load` path: OCI Relay, its default on
users' machines, is a binary it fetches from GitHub releases, which this machine cannot reach
(docs/launching.md). Nothing of sparkrun is replaced; only the GPU launch is not run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imgbuild.engine import Engine
from tests.docker.conftest import MakeProject
from tests.support.node_daemon import Node, node_daemon
from tests.support.sshd import SSHD, Sshd, sshd_to

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
PYTHON = Path(os.environ.get("IMGBUILD_SPARKRUN_PYTHON", "/opt/imgbuild-sparkrun/bin/python"))
DRIVER = ROOT / "tests" / "support" / "sparkrun_distribute.py"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """A node dockerd on the containerd store, as the main engine is, so an image id is its manifest digest."""
    with node_daemon(tmp_path / "node", "br-imgb-srd", containerd_store=True, address="10.214.79.1/24") as n:
        yield n


@pytest.fixture
def login(tmp_path: Path, node: Node) -> Iterator[Sshd]:
    if not Path(SSHD).exists():
        pytest.fail(f"{SSHD} is missing: run `bash .ci/setup-sshd.sh`")
    with sshd_to(tmp_path / "sshd", node.socket) as s:
        yield s


def sparkrun_env(tmp: Path, login: Sshd, cache: Path) -> dict[str, str]:
    """sparkrun's environment: imgbuild's entry points installed, the plugin enabled, ssh through the test's sshd."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version = meta.get("version", "0.1.0")
    dist = tmp / "site" / f"imgbuild-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: imgbuild\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text(
        "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in meta["entry-points"].items())
    )
    env = {
        **os.environ,
        "HOME": str(tmp / "home"),
        "PYTHONPATH": f"{tmp / 'site'}:{ROOT / 'src'}",
        "NO_COLOR": "1",
        # what the builder runs: this checkout's imgbuild, on the skeleton base, with the test's cache
        "IMGBUILD_COMMAND": f"{sys.executable} -m imgbuild",
        "IMGBUILD_BASE": "skeleton",
        "IMGBUILD_CACHE": str(cache),
    }
    for key in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "DOCKER_HOST", "DOCKER_CONTEXT"):
        env.pop(key, None)
    done = subprocess.run(
        [str(PYTHON.parent / "sparkrun"), "plugins", "enable", "imgbuild"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config = tmp / "home" / ".config" / "sparkrun" / "config.yaml"
    data = yaml.safe_load(config.read_text()) or {}
    data["ssh"] = {"options": ["-F", str(login.config)]}
    # OCI Relay is registered and selected by default ("auto"); unable to download its binary here it
    # falls back to save/load with a warning. Naming the builtin path keeps the test off the network.
    data["container_distribution_provider"] = "builtin"
    config.write_text(yaml.safe_dump(data))
    # no recipe registries: without this file sparkrun clones its default ones from GitHub on every command (warning
    # when it cannot); the tests name their recipes by path
    (config.parent / "registries.yaml").write_text("config_version: 1\nregistries: []\n")
    return env


def recipe(path: Path, project: Path, repo: str) -> Path:
    """A one-node recipe as `imgbuild recipe --builder` writes one, for the synthetic project."""
    path.write_text(
        yaml.safe_dump(
            {
                "recipe_version": "2",
                "description": "synthetic latest, one node",
                "model": "deepseek-ai/DeepSeek-V4.1-Flash",
                "runtime": "vllm",
                "min_nodes": 1,
                "max_nodes": 1,
                "container": f"{repo}:latest",
                "builder": "imgbuild",
                "builder_config": {"project": str(project), "variant": "latest", "platform": "linux/arm64"},
                "defaults": {"port": 8000, "tensor_parallel": 1},
                "metadata": {"imgbuild": {"variant": "latest"}},
            },
            sort_keys=False,
        )
    )
    return path


def launch_prep(env: dict[str, str], recipe_path: Path, host: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [str(PYTHON), str(DRIVER), str(recipe_path), host],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_sparkrun_builds_through_imgbuild_and_distributes_to_a_node(
    tmp_path: Path, make_project: MakeProject, prefix: str, engine: Engine, node: Node, login: Sshd
) -> None:
    assert PYTHON.exists(), f"{PYTHON} is missing: run `bash .ci/setup-sparkrun.sh`"
    project = make_project("srdist")
    repo = f"{prefix}-srdist"  # make_project's repository for the name
    env = sparkrun_env(tmp_path / "sparkrun", login, tmp_path / "cache")
    path = recipe(tmp_path / "recipe.yaml", project, repo)

    seen, log = launch_prep(env, path, login.host)

    # the builder step: the plugin built the variant and handed back the immutable tag, not the moving one
    assert seen["builder"] == "ImgbuildBuilder"
    assert seen["source_image"] == f"{repo}:latest"
    pinned = seen["head_image"]
    assert re.fullmatch(rf"{re.escape(repo)}:[0-9][\w.]*-[0-9a-f]{{12,}}", pinned), pinned
    assert seen["images_by_node"] == [pinned]
    here = engine.client.images.get(pinned)
    assert f"{repo}:latest" in here.tags  # imgbuild moved its moving tag too; sparkrun ships the pin only

    # the distribution: the builtin save/ssh/load path moved it; the node holds the same image under the pin
    assert "image not present, will transfer" in log, log[-4000:]
    assert seen["providers"] == ["oci-relay"] and "OCI Relay" not in log  # registered, not used: builtin
    assert "Pipeline <- node1 OK" in log  # run_pipeline_to_remotes_parallel: docker save | ssh node1 docker load
    there = node.client().images.get(pinned)
    assert there.id == here.id
    assert there.labels == here.labels and there.labels  # imgbuild's provenance labels came along
    assert there.tags == [pinned]
    assert seen["content_images_by_node"] == [here.id]  # sparkrun's own check of the resident id, over ssh

    # a second launch: imgbuild builds nothing new, sparkrun's identity check skips the node
    again, log = launch_prep(env, path, login.host)
    assert again["head_image"] == pinned and again["content_images_by_node"] == [here.id]
    # on the containerd store both engines report a repo digest (the manifest's) for the tag, so sparkrun's
    # reason is "digest match"; an id match is its fallback for stores without one
    assert re.search(r"node1: image up-to-date \((digest|id) match\), skipping", log), log[-4000:]
    assert "Pipeline" not in log
