"""image.entrypoint against a real base whose ENTRYPOINT is a passthrough wrapper (NGC-style, exec "$@")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from imgbuild.engine import Engine
from tests.docker.conftest import MakeProject, run_cli
from tests.support.jsonschema_check import load_json
from tests.support.synth_images import docker_build

pytestmark = pytest.mark.docker

WRAPPER = "printf '#!/bin/sh\\nexport WRAPPED=1\\nexec \"$@\"\\n' > /e.sh && chmod +x /e.sh"


@pytest.fixture
def wrapper_base(engine: Engine, skeleton_base: str, prefix: str) -> Iterator[str]:
    tag = f"{prefix}-wrapbase:1"
    dockerfile = f'FROM {skeleton_base}\nRUN {WRAPPER}\nENTRYPOINT ["/e.sh"]\n'
    docker_build(tag, dockerfile)
    yield tag
    engine.untag(tag)


def test_undecided_passthrough_fails_before_building_then_keep_keeps_it(
    make_project: MakeProject, engine: Engine, prefix: str, wrapper_base: str, tmp_path: Path
) -> None:
    project = make_project("wrap", base=wrapper_base)
    repo = f"{prefix}-wrap"
    env = {"IMGBUILD_CACHE": str(tmp_path / "cache")}
    failed = run_cli(project, "build", "latest", "--json", env=env)
    assert failed.returncode == 3, failed.stdout + failed.stderr
    error = load_json(failed.stdout)["error"]
    assert "image.entrypoint is not set" in error["message"] and "['/e.sh']" in error["message"]
    assert 'exec "$@"' in error["hint"] and '["vllm","serve"]' in error["hint"]
    assert not [t for img in engine.client.images.list() for t in img.tags if t.startswith(f"{repo}:")]

    spec = project / "images" / "latest.yaml"
    data = yaml.safe_load(spec.read_text())
    data["image"]["entrypoint"] = "keep"
    spec.write_text(yaml.safe_dump(data))
    built = run_cli(project, "build", "latest", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    info = engine.require(f"{repo}:latest")
    assert info.entrypoint == ("/e.sh",) and not info.cmd
    assert info.labels["imgbuild.entrypoint"] == "keep"
    smoked = run_cli(project, "smoke", f"{repo}:latest", "--json", env=env)
    report = load_json(smoked.stdout)["reports"][0]
    assert smoked.returncode == 0 and report["ok"], smoked.stdout
    checks = {(c["group"], c["name"]): c for c in report["checks"]}
    assert checks[("config", "entrypoint")]["status"] == "pass" and "kept" in checks[("config", "entrypoint")]["detail"]
    assert checks[("launcher", "entrypoint")]["status"] == "pass"
