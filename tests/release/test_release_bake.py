"""The committed bake file against the real project (needs the pinned release, cached once)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.layer_agreement import assert_agree

pytestmark = pytest.mark.release
ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_bake_file_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(ROOT), "bake", "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + "\nregenerate with `imgbuild bake` and commit buildkit/docker-bake.json"


def test_plan_the_committed_bake_file_and_build_agree_on_every_variant(tmp_path: Path) -> None:
    """One layer-sharing decision (plan/layers.py): the real project's variants have the same layers in each."""
    chains = assert_agree(ROOT, {"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"})
    assert set(chains) == {p.stem for p in (ROOT / "images").glob("*.yaml")}
