"""The real project (seven patches on the pinned vLLM, one on the pinned FlashInfer) built on the skeleton stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.engine import Engine
from tests.docker.conftest import run_cli
from tests.support.jsonschema_check import load_json

pytestmark = [pytest.mark.docker, pytest.mark.release]

ROOT = Path(__file__).resolve().parents[2]
ENGRAM = ("engram.py", "model_state.py", "weight_utils.py")


def test_latest_and_engram_mem_match_the_deployment_report(engine: Engine, prefix: str) -> None:
    assert any(ROOT.glob("patches/*.patch")), "the real series is empty: this test builds it"
    repo = f"{prefix}-real/vllm-dsv41"
    proc = run_cli(ROOT, "build", "latest", "engram-mem", "--base", "skeleton", "--repository", repo)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "byte for byte" in proc.stdout

    latest, mem = engine.require(f"{repo}:latest"), engine.require(f"{repo}:engram-mem")
    assert latest.layers[: len(mem.layers)] == mem.layers and len(latest.layers) == len(mem.layers) + 1
    for info in (latest, mem):
        assert info.arch == "arm64" and not info.entrypoint and not info.cmd

    states = {}
    for tag in ("latest", "engram-mem"):
        (report,) = load_json(run_cli(ROOT, "smoke", f"{repo}:{tag}", "--static", "--json").stdout)["reports"]
        assert report["ok"], [c for c in report["checks"] if c["status"] == "fail"]
        states[tag] = {f["path"].rsplit("/", 1)[-1]: f["actual"] for f in report["files"]}
    assert len(states["latest"]) == 8 and set(states["latest"].values()) == {"patched"}
    assert {n for n, s in states["engram-mem"].items() if s == "original"} == set(ENGRAM)
    assert {n for n, s in states["engram-mem"].items() if s == "patched"} == set(states["latest"]) - set(ENGRAM)

    again = run_cli(ROOT, "build", "latest", "engram-mem", "--base", "skeleton", "--repository", repo)
    assert again.returncode == 0 and again.stderr.count("reused (no docker build)") == 2
