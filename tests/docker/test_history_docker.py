"""`imgbuild history` and `rollback` on a project built three times (a patch edited between builds)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from imgbuild.engine import Engine
from tests.docker.conftest import MakeProject, run_cli
from tests.support.jsonschema_check import load_json

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]


def _json(proc: Any) -> Any:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return load_json(proc.stdout)


def test_three_builds_history_and_rollback(
    make_project: MakeProject, engine: Engine, prefix: str, skeleton_base: str, tmp_path: Path
) -> None:
    project = make_project("hist")
    repo = f"{prefix}-hist"
    env = {"IMGBUILD_CACHE": str(tmp_path / "cache")}
    patch = project / "patches" / "0001-attn.patch"
    for n in range(3):
        if n:  # another input each time: the patch's header, so the series digest (and inputs) change
            text = patch.read_text()
            patch.write_text(
                re.sub(r"^Description: .*$", f"Description: attention, revision {n}", text, count=1, flags=re.M)
            )
        proc = run_cli(project, "build", "latest", "--base", "skeleton", env=env)
        assert proc.returncode == 0, proc.stderr + proc.stdout

    hist = _json(run_cli(project, "history", "latest", "--json", env=env))
    entries = hist["entries"]
    assert len(entries) == 3 and len({e["inputs"] for e in entries}) == 3
    assert [e["built_at_source"] for e in entries] == ["record"] * 3
    newest, middle, oldest = (e["ref"] for e in entries)
    assert entries[0]["moving"] == [f"{repo}:latest"] and entries[1]["moving"] == entries[2]["moving"] == []
    assert all(e["kind"] == "image" and e["platforms"] == ["linux/arm64"] for e in entries)
    assert entries[0]["base"]["name"].endswith(skeleton_base.split("/")[-1])
    assert entries[0]["upstream"]["tag"] == "v1.0.0"
    assert entries[0]["patches"] == {"0001-attn": "applied", "0002-sparse": "applied", "0003-engram": "applied"}
    text = run_cli(project, "history", "latest", env=env)
    assert text.returncode == 0 and f"{repo}:latest -> {newest}" in text.stdout, text.stdout + text.stderr

    # default: back one, smoke-tested first; then `smoke` on the moving tag passes
    rolled = _json(run_cli(project, "rollback", "latest", "--json", env=env))
    assert rolled["target"]["ref"] == middle and rolled["smoke"]["ok"]
    assert rolled["moves"] == [{"ref": f"{repo}:latest", "from": newest, "from_id": entries[0]["image_id"],
                                "to": middle, "to_id": entries[1]["image_id"]}]  # fmt: skip
    assert engine.require(f"{repo}:latest").id == entries[1]["image_id"]
    smoked = run_cli(project, "smoke", f"{repo}:latest", env=env)
    assert smoked.returncode == 0, smoked.stdout + smoked.stderr

    # the order is when each was built, not when a tag last moved: a second rollback goes further back
    again = _json(run_cli(project, "history", "latest", "--json", env=env))
    assert [e["ref"] for e in again["entries"]] == [newest, middle, oldest]
    assert again["entries"][1]["moving"] == [f"{repo}:latest"]
    said = run_cli(project, "rollback", "latest", "--no-smoke", env=env)
    assert said.returncode == 0 and f"{repo}:latest: moved from {middle} to {oldest}" in said.stdout, said.stdout
    assert engine.require(f"{repo}:latest").id == entries[2]["image_id"]
    last = run_cli(project, "rollback", "latest", "--json", env=env)
    assert last.returncode == 2 and "oldest" in load_json(last.stdout)["error"]["message"]

    # recipe pins the rolled-back image's immutable tag, or any one given with --image
    (project / "deploy").mkdir(exist_ok=True)
    shutil.copy(ROOT / "deploy" / "profiles.yaml", project / "deploy" / "profiles.yaml")
    out = tmp_path / "out"
    pinned = _json(run_cli(project, "recipe", "latest", "--profile", "TP8-1M", "--out", str(out), "--json", env=env))
    assert pinned["image"] == oldest
    given = run_cli(project, "recipe", "latest", "--profile", "TP8-1M", "--out", str(out), "--image", middle,
                    "--json", env=env)  # fmt: skip
    assert _json(given)["image"] == middle

    # --to: forward again by name; an image that is not this variant's is refused and nothing moves
    fwd = _json(run_cli(project, "rollback", "latest", "--to", newest.rpartition(":")[2], "--no-smoke", "--json",
                        env=env))  # fmt: skip
    assert fwd["moves"][0]["from"] == oldest and fwd["moves"][0]["to"] == newest
    stranger = f"{repo}:1.0.0-{'0' * 12}"
    engine.tag(engine.require(skeleton_base).id, stranger)
    refused = run_cli(project, "rollback", "latest", "--to", stranger, "--json", env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    message = load_json(refused.stdout)["error"]["message"]
    assert "imgbuild.variant is None, not 'latest'" in message
    assert engine.require(f"{repo}:latest").id == entries[0]["image_id"]
