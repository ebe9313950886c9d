"""Two upstreams in one image (issue 26): the synthetic vLLM project plus a FlashInfer pin and patch,
built on the skeleton (which then holds both pinned trees), smoke-tested, and its labels read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgbuild.engine import Engine
from tests.docker.conftest import run_cli
from tests.support.jsonschema_check import load_json
from tests.support.multi_world import FI_PATCHED, add_flashinfer, flashinfer_release
from tests.support.synth import Upstream
from tests.support.synth_images import ENGRAM, SM121, engram_project

pytestmark = pytest.mark.docker

SMOKE = [
    "python3 -c 'import vllm.attention as a; assert a.attn_3() == 3'",
    "python3 -c 'import flashinfer.policy as p; assert p.page_4() == 64'",
    "python3 -c 'import flashinfer.uses_policy as u; assert u.PAGE == 64'",
]


def test_two_upstreams_build_smoke_and_label(
    tmp_path: Path, synth_upstream: Upstream, prefix: str, engine: Engine
) -> None:
    fi = Upstream(tmp_path / "fi-upstream")
    flashinfer_release(fi)
    repo = f"{prefix}-multi"
    root = engram_project(tmp_path / "project", synth_upstream, repo, skeleton_commands=SMOKE)
    patch = add_flashinfer(root, fi)
    env: dict[str, str] = {}  # the test's own cache (conftest): the skeleton's rootfs is made there once
    proc = run_cli(root, "build", "latest", "engram-mem", "--base", "skeleton", env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout

    latest, mem = engine.require(f"{repo}:latest"), engine.require(f"{repo}:engram-mem")
    # the FlashInfer file sits in the sm121 layer both variants share; the Engram revert adds no layer
    assert latest.layers[: len(mem.layers)] == mem.layers and len(latest.layers) == len(mem.layers) + 1

    smoke = run_cli(root, "smoke", "latest", "engram-mem", "--base", "skeleton", "--json", env=env)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    checks = [c for img in load_json(smoke.stdout)["reports"] for c in img["checks"]]
    assert any(c["name"] == f"compile {FI_PATCHED}" and c["status"] == "pass" for c in checks), checks

    for tag in ("latest", "engram-mem"):
        static = run_cli(root, "smoke", f"{repo}:{tag}", "--static", "--json", env=env)
        assert static.returncode == 0, static.stdout + static.stderr
        (report,) = load_json(static.stdout)["reports"]
        assert report["ok"], [c for c in report["checks"] if c["status"] == "fail"]
        files = {f["path"]: f["actual"] for f in report["files"]}
        assert files[FI_PATCHED] == "patched" and all(files[p] == "patched" for p in SM121)
        assert all(files[p] == ("patched" if tag == "latest" else "original") for p in ENGRAM)
        # what `docker image inspect` shows: each pinned upstream and the patches applied to it
        ups = {u["name"]: u for u in json.loads(engine.require(f"{repo}:{tag}").labels["imgbuild.upstreams"])}
        assert list(ups) == ["vllm", "flashinfer"] and ups["flashinfer"]["tag"] == "0.1"
        assert ups["flashinfer"]["patches"] == [patch.removesuffix(".patch")]
