"""`imgbuild recipe` against a built image, sparkrun's own loader and a registry."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from imgbuild.engine import Engine
from tests.docker.conftest import Built
from tests.support.jsonschema_check import load_json

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
SPARKRUN_PYTHON = os.environ.get("IMGBUILD_SPARKRUN_PYTHON", "/opt/imgbuild-sparkrun/bin/python")


@pytest.fixture(scope="module")
def written(built: Built, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    (built.project / "deploy").mkdir(exist_ok=True)
    shutil.copy(ROOT / "deploy" / "profiles.yaml", built.project / "deploy" / "profiles.yaml")
    out = tmp_path_factory.mktemp("recipes")
    proc = built.cli("recipe", "engram-mem", "--profile", "TP8-300K", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = load_json(proc.stdout)
    return data


def flags(argv: list[str]) -> tuple[list[str], dict[str, str | None]]:
    """(positionals, {flag: value or None}) of a `vllm serve` command line."""
    pos: list[str] = []
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        if argv[i].startswith("-"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.startswith("-"):
                out[argv[i]] = None
                i += 1
            else:
                out[argv[i]] = nxt
                i += 2
        else:
            pos.append(argv[i])
            i += 1
    return pos, out


def test_recipe_pins_the_immutable_tag_of_the_local_image(
    written: dict[str, Any], built: Built, engine: Engine
) -> None:
    image = engine.require(f"{built.repo}:engram-mem")
    immutable = [t for t in image.tags if t != f"{built.repo}:engram-mem" and t.startswith(f"{built.repo}:")]
    assert len(immutable) == 1 and re.search(r":[^:]+-[0-9a-f]{12}$", immutable[0])
    assert written["image"] == immutable[0] and written["image_id"] == image.id
    assert engine.require(written["image"]).id == image.id
    assert written["found"] == f"local {built.repo}:engram-mem" and written["platform"] == "linux/arm64"
    recipe = yaml.safe_load(Path(written["recipe"]).read_text())
    # a repository reference sparkrun's distribution can tag on a node, and not the tag the next build moves
    assert recipe["container"] == immutable[0]
    # an id given with --image is resolved to the same tag: a bare id is never written
    again = built.cli("recipe", "engram-mem", "--profile", "TP8-300K", "--image", image.id, "--json", "--out",
                      str(Path(written["recipe"]).parent / "by-id"))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert load_json(again.stdout)["image"] == immutable[0]


def test_sparkrun_loader_reads_the_same_image_env_and_serve_args(written: dict[str, Any]) -> None:
    assert Path(SPARKRUN_PYTHON).exists(), f"{SPARKRUN_PYTHON} is missing: run `bash .ci/setup-sparkrun.sh`"
    proc = subprocess.run(
        [SPARKRUN_PYTHON, str(ROOT / "tests" / "support" / "sparkrun_check.py"), written["recipe"]],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["runtime"] == "vllm-distributed" and seen["issues"] == []
    assert seen["container"] == written["image"]
    assert seen["env"] == written["recipe_env"] != written["env"]
    assert written["left_to_sparkrun"] == ["NCCL_CROSS_NIC", "NCCL_IB_MERGE_NICS", "NCCL_IGNORE_CPU_AFFINITY"]
    assert seen["env"]["VLLM_FLASHINFER_AUTOTUNE"] == "0" and "DSV41_ENGRAM_DISK" not in seen["env"]
    assert (seen["min_nodes"], seen["max_nodes"]) == (8, 8)
    assert seen["executor"] == {
        "ulimit": ["nofile=1048576:1048576", "memlock=-1:-1", "stack=67108864"],
        "cap_add": ["IPC_LOCK"],
        "memory_limit": "112g",
    }
    # the serve arguments: sparkrun leaves the mp backend to its native multi-node launch
    ours_pos, ours = flags(written["serve"])
    theirs_pos, theirs = flags(shlex.split(seen["command"]))
    assert ours_pos == theirs_pos == ["vllm", "serve", "deepseek-ai/DeepSeek-V4.1-Flash"]
    assert ours.pop("--distributed-executor-backend") == "mp"
    assert ours == theirs
    assert theirs["-tp"] == "8" and theirs["--gpu-memory-utilization"] == "0.8" and theirs["--block-size"] == "128"
    assert json.loads(theirs["--speculative-config"] or "")["num_speculative_tokens"] == 5


@pytest.mark.usefixtures("written")  # the recipe files exist before the registry is asked
def test_registry_pins_the_published_digest(built: Built, engine: Engine, tmp_path: Path) -> None:
    """--registry: the digest the registry serves for the variant's tag (pushed here with `docker push`)."""
    from tests.support.registry_env import RegistryProcess

    registry = RegistryProcess.start(tmp_path / "registry")
    pushed = f"{registry.host}/{built.repo}:engram-mem"
    try:
        engine.tag(engine.require(f"{built.repo}:engram-mem").id, pushed)
        push = subprocess.run(["docker", "push", pushed], capture_output=True, text=True, check=False)
        assert push.returncode == 0, push.stderr
        digest = next(w for w in push.stdout.split() if w.startswith("sha256:"))
        out = tmp_path / "out"
        proc = built.cli(
            "recipe", "engram-mem", "--profile", "TP8-300K", "--registry", registry.host, "--out", str(out), "--json"
        )
        assert proc.returncode == 0, proc.stderr
        data = load_json(proc.stdout)
        assert data["image"] == f"{registry.host}/{built.repo}@{digest}" and data["image_id"] is None
        assert yaml.safe_load(Path(data["recipe"]).read_text())["container"] == data["image"]
        missing = built.cli("recipe", "latest", "--profile", "TP8-1M", "--registry", registry.host, "--out", str(out))
        assert missing.returncode == 9 and "is not in the registry" in missing.stderr
    finally:
        engine.untag(pushed)
        registry.stop()
