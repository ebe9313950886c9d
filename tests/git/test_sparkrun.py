"""imgbuild against sparkrun 0.4.2's own code (fast tier: no docker, no network).

- `sparkrun recipe validate --strict --json` (its CLI, in its venv) on every recipe `imgbuild recipe` writes
  for the shipped profiles, pinned and with `builder: imgbuild`;
- the builder plugin found through sparkrun's installed-plugin discovery (the `sparkrun.plugins` entry point
  declared in pyproject.toml), validated and called with a stand-in `imgbuild` command.

sparkrun needs Python >= 3.12: `.ci/setup-sparkrun.sh` puts it in /opt/imgbuild-sparkrun
(`$IMGBUILD_SPARKRUN_PYTHON`). Its config and cache go to a temporary HOME.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from imgbuild.deploy import profiles as deploy
from imgbuild.deploy import recipes
from imgbuild.deploy.recipes import write_recipe
from imgbuild.jsondoc import document
from imgbuild.project import Project

ROOT = Path(__file__).resolve().parents[2]
PYTHON = Path(os.environ.get("IMGBUILD_SPARKRUN_PYTHON", "/opt/imgbuild-sparkrun/bin/python"))
SPARKRUN = PYTHON.parent / "sparkrun"
PINNED = "vllm-dsv41@sha256:" + "ab" * 32
BUILT = "vllm-dsv41:0.33.0-0123456789ab"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """sparkrun's environment: imgbuild's entry points (from pyproject.toml) installed, the plugin enabled."""
    assert PYTHON.exists(), f"{PYTHON} is missing: run `bash .ci/setup-sparkrun.sh`"
    tmp = tmp_path_factory.mktemp("sparkrun")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dist = tmp / "site" / f"imgbuild-{meta.get('version', '0.1.0')}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: imgbuild\nVersion: {meta.get('version', '0.1.0')}\n")
    groups = meta["entry-points"]
    (dist / "entry_points.txt").write_text(
        "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in groups.items())
    )
    out = {
        **os.environ,
        "HOME": str(tmp / "home"),
        "PYTHONPATH": f"{tmp / 'site'}:{ROOT / 'src'}",
        "NO_COLOR": "1",
    }
    out.pop("XDG_CONFIG_HOME", None)
    out.pop("XDG_CACHE_HOME", None)
    done = sparkrun(out, "plugins", "enable", "imgbuild")
    assert done.returncode == 0, done.stderr
    return out


def sparkrun(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SPARKRUN), *args], env=env, cwd=cwd, capture_output=True, text=True, check=False)


def validate(env: dict[str, str], recipe: Path) -> dict[str, Any]:
    done = sparkrun(env, "recipe", "validate", "--strict", "--json", recipe.name, cwd=recipe.parent)
    report = json.loads(done.stdout)
    report["rc"] = done.returncode
    return report


def all_profiles() -> list[tuple[str, str]]:
    _, data = deploy.load_profiles(ROOT)
    return [(deploy.profile(ROOT, name).variant, name) for name in data.profiles]


def test_the_shipped_profiles_cover_both_variants() -> None:
    assert sorted(v for v, _ in all_profiles()) == ["engram-mem", "latest"]


@pytest.mark.parametrize(("variant", "profile"), all_profiles())
def test_strict_validator_passes_the_pinned_recipe(
    env: dict[str, str], tmp_path: Path, variant: str, profile: str
) -> None:
    done = write_recipe(Project.load(ROOT), variant, profile, out=tmp_path, image=PINNED)
    report = validate(env, done.path)
    assert (report["rc"], report["issues"]) == (0, []), report
    recipe = yaml.safe_load(done.path.read_text())
    assert "mode" not in recipe and recipe["min_nodes"] == recipe["max_nodes"] == 8
    assert not set(recipe["env"]) & recipes.SPARKRUN_MANAGED_ENV
    # the seed's own tuning stays; what sparkrun detects is named in the comment
    assert recipe["env"]["NCCL_MAX_NCHANNELS"] == "8" and recipe["env"]["NCCL_IB_ROCE_VERSION_NUM"] == "2"
    assert "Not in env: NCCL_CROSS_NIC, NCCL_IB_MERGE_NICS, NCCL_IGNORE_CPU_AFFINITY" in done.path.read_text()
    assert done.env["NCCL_CROSS_NIC"] == "1" and done.env == {**recipe["env"], **done.env}


def test_strict_validator_and_plugin_loader_take_the_builder_recipe(env: dict[str, str], tmp_path: Path) -> None:
    done = write_recipe(Project.load(ROOT), "latest", "TP8-1M", out=tmp_path, builder=True)
    recipe = yaml.safe_load(done.path.read_text())
    assert recipe["builder"] == "imgbuild" and recipe["container"] == "vllm-dsv41:latest"
    assert recipe["builder_config"] == {"project": str(ROOT), "variant": "latest", "platform": "linux/arm64"}
    # the oldest sparkrun with what the plugin uses; sparkrun's loader reads it and the strict validator takes it
    assert recipe["min_sparkrun_version"] == recipes.MIN_SPARKRUN_BUILDER == "0.4.0"
    # the builder resolves through sparkrun's plugin discovery, or this is a `builder-unknown` error
    report = validate(env, done.path)
    assert (report["rc"], report["issues"]) == (0, []), report
    # a published variant (`--builder --registry`): the plugin's key, which the strict validator takes too
    pub = write_recipe(Project.load(ROOT), "latest", "TP8-1M", out=tmp_path / "pub", builder=True, registry="reg:5000")
    assert yaml.safe_load(pub.path.read_text())["builder_config"]["registry"] == "reg:5000"
    report = validate(env, pub.path)
    assert (report["rc"], report["issues"]) == (0, []), report

    args = tmp_path / "args"
    ok = stub(tmp_path / "ok", f'echo "$@" > {args}\n' + "echo '" + json.dumps(build_json()) + "'\n")
    error = {"type": "DockerError", "message": "docker is not running", "hint": "start dockerd", "exit_code": 7}
    fail = stub(tmp_path / "fail", "echo '" + json.dumps(document("error", {"error": error})) + "'\nexit 7\n")
    # another imgbuild's documents: a build/3, and a build document without a schema id (before versioning)
    later = stub(tmp_path / "later", "echo '" + json.dumps({**build_json(), "schema": "imgbuild.build/3"}) + "'\n")
    unversioned = {k: v for k, v in build_json().items() if k != "schema"}
    older = stub(tmp_path / "older", "echo '" + json.dumps(unversioned) + "'\n")
    check = ROOT / "tests" / "support" / "sparkrun_builder_check.py"
    proc = subprocess.run(
        [str(PYTHON), str(check), str(done.path), ok, fail, later, older],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    assert seen["class"] == "imgbuild.deploy.sparkrun_builder.ImgbuildBuilder"
    row = next(r for r in seen["inventory"] if r["name"] == "imgbuild")
    assert row == {
        "name": "imgbuild",
        "module": "imgbuild.deploy.sparkrun_builder",
        "package": "imgbuild",
        "loaded": True,
        "failure": None,
    }
    assert seen["validate"] == [] and seen["pull_ref"] is None
    assert seen["built"] == BUILT  # the immutable tag, which sparkrun then distributes
    assert args.read_text().split() == ["-C", str(ROOT), "build", "latest", "--json", "--platform", "linux/arm64"]
    assert seen["failed"] == {
        "type": "ImgbuildBuildError",
        "message": "imgbuild build failed (exit 7): docker is not running (start dockerd)",
        "exit_code": 7,
    }
    later_error, older_error = seen["others"]
    assert (
        later_error["exit_code"] == 1
        and "is 'imgbuild.build/3', and this reader reads 'imgbuild.build/2'" in (later_error["message"])
    )
    assert "carries no schema id 'imgbuild.build/2'" in older_error["message"]
    assert set(seen["managed_env"]) == recipes.SPARKRUN_MANAGED_ENV  # our copy of sparkrun's list


def build_json() -> dict[str, Any]:
    image = {"variant": "latest", "platform": "linux/arm64", "image_id": "sha256:" + "cd" * 32, "immutable": BUILT}
    return document("build", {"images": [{**image, "moving": ["vllm-dsv41:latest"], "index_ref": None}]})


def stub(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_plugin_module_is_loaded_only_by_sparkrun() -> None:
    """imgbuild (3.11+) never imports it, nor its delegated-mode helper: they run in sparkrun's process (3.12+). No
    module imports either, at the top or inside a function (the plugin's shared helpers are sparkrun_cli.py)."""
    src = ROOT / "src" / "imgbuild"
    plugin = {src / "deploy" / "sparkrun_builder.py", src / "deploy" / "sparkrun_head.py"}
    importers = []
    for path in set(src.rglob("*.py")) - plugin:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any("sparkrun_builder" in n or "sparkrun_head" in n for n in names):
                    importers.append(path)
    assert importers == []
