"""Which variants share layers is decided once (plan/layers.py, `share_layers`): `imgbuild plan`, the bake file
and `imgbuild build` give every variant the same layers, whatever `--platform` and the variants asked for.

The project: `latest` on two platforms, `engram-mem` (from latest) on the second only, so a build of each on its
first platform puts them on different platforms, and `attn-only` (one patch) on another base, a group of its own.
"""

from __future__ import annotations

from pathlib import Path

from imgbuild.plan.bake import BAKE_FILE
from tests.support.layer_agreement import assert_agree
from tests.support.runner import imgbuild_here
from tests.support.synth import Upstream, make_project
from tests.support.synth_images import patches, release, variants


def three_variants(root: Path, upstream: Upstream) -> Path:
    release(upstream)
    v = variants("vllm-test")
    v["latest"]["image"]["platforms"] = ["linux/arm64", "linux/amd64"]  # type: ignore[index]
    v["engram-mem"]["image"]["platforms"] = ["linux/amd64"]  # type: ignore[index]
    v["attn-only"] = {
        "name": "attn-only",
        "from": "latest",
        "revert": ["0002-sparse", "engram"],
        "image": {"tags": ["attn-only"], "base": "other/base:2"},
    }
    return make_project(root, upstream, "v1.0.0", patches(upstream), v)


def test_plan_the_bake_file_and_build_agree_on_every_variant(tmp_path: Path, upstream: Upstream) -> None:
    root = three_variants(tmp_path / "p", upstream)
    assert imgbuild_here(root, "bake").returncode == 0 and (root / BAKE_FILE).is_file()
    chains = assert_agree(root, {"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"})
    # latest and engram-mem share their bottom layer (across platforms); attn-only, on its own base, shares none
    assert len(chains["latest"]) == 2 and chains["engram-mem"] == chains["latest"][:1]
    assert len(chains["attn-only"]) == 1 and chains["attn-only"][0] not in chains["latest"]


def test_plan_names_each_base_when_the_variants_have_several(tmp_path: Path, upstream: Upstream) -> None:
    root = three_variants(tmp_path / "p", upstream)
    out = imgbuild_here(root, "plan", "attn-only")
    assert out.returncode == 0, out.stderr
    assert "on other/base:2, site-packages /usr/local/lib/python3.12/dist-packages:" in out.stdout
    assert "attn-only = base + layer 0" in out.stdout and "latest = base" not in out.stdout
