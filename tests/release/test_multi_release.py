"""The shipped stack's second upstream: FlashInfer's Python package from the package index
(flashinfer-python 0.7.4, which the override in patches/upstream.yaml puts where vLLM 0.34.0 asks for 0.7.3), its
patch checked beside vLLM's; on the 0.33.0 project (FlashInfer 0.7.2.post1), carried to a later release (0.7.4)
by `check --onto` and `rebase --onto flashinfer=...`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from imgbuild.config.models import WheelSource
from imgbuild.project import Project
from tests.support.jsonschema_check import load_json
from tests.support.release_033 import checkout_0_33_0

pytestmark = pytest.mark.release
ROOT = Path(__file__).resolve().parents[2]
POLICY = "flashinfer/mla/_sparse_mla_sm120/_policy.py"
LATER = "0.7.4"


def imgbuild(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(root), *args], capture_output=True, text=True, check=False
    )


def test_flashinfer_is_pinned_from_the_package_index() -> None:
    project = Project.load(ROOT)
    fi = project.pin_named("flashinfer")
    assert isinstance(fi.source, WheelSource) and fi.source.project == "flashinfer-python"
    assert fi.source.version == "0.7.4" and project.pins[0].name == "vllm"
    assert project.resolved("flashinfer").commit == fi.commit  # the wheel's files, committed reproducibly
    assert project.tree().read(POLICY) is not None and project.tree().read("vllm/__init__.py") is not None
    mine = project.patches_of("flashinfer")
    assert [p.paths for p in mine] == [(POLICY,)]


def test_check_reports_the_flashinfer_patch_exact_on_its_release() -> None:
    out = imgbuild(ROOT, "patches", "check", "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    report = load_json(out.stdout)
    by = {p["patch"]: (p["upstream"], p["method"]) for p in report["patches"]}
    assert by["0008-flashinfer-sm120-page-size-note.patch"] == ("flashinfer", "exact")
    assert sum(1 for up, _ in by.values() if up == "vllm") == 7
    assert [u["name"] for u in report["upstreams"]] == ["vllm", "flashinfer"]


def test_check_onto_a_later_flashinfer_moves_only_its_patch(tmp_path: Path) -> None:
    out = imgbuild(checkout_0_33_0(tmp_path / "proj"), "patches", "check", "--onto", f"flashinfer={LATER}", "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    data = load_json(out.stdout)
    assert data["refs"][0]["upstream"] == "flashinfer" and data["refs"][0]["tag"] == f"v{LATER}"
    series = next(v for v in data["variants"] if v["variant"] == "series")
    carried = series["results"][f"flashinfer={LATER}"]["patches"]
    assert list(carried) == ["0008-flashinfer-sm120-page-size-note.patch"]
    assert carried["0008-flashinfer-sm120-page-size-note.patch"]["method"] in ("exact", "offset")


def test_rebase_onto_a_later_flashinfer_updates_only_its_pin(tmp_path: Path) -> None:
    root = checkout_0_33_0(tmp_path / "proj")
    vllm_patches = {p: (root / "patches" / p).read_bytes() for p in (root / "patches").glob("000[1-7]*.patch")}
    before = Project.load(root)
    out = imgbuild(root, "patches", "rebase", "--onto", f"flashinfer={LATER}", "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    after = Project.load(root)
    assert after.pin == before.pin  # vLLM's pin did not move
    fi = after.pin_named("flashinfer")
    assert fi.tag == f"v{LATER}" and isinstance(fi.source, WheelSource) and fi.source.version == LATER
    assert fi.source.filename == f"flashinfer_python-{LATER}-py3-none-any.whl"
    assert {p: (root / "patches" / p).read_bytes() for p in vllm_patches} == vllm_patches
    check = imgbuild(root, "patches", "check", "--json")
    assert check.returncode == 1, check.stderr + check.stdout  # every patch applies, but the pins now disagree
    report = load_json(check.stdout)
    assert all(p["method"] == "exact" for p in report["patches"])
    assert report["pin_problems"] == [
        f"vLLM 0.33.0 requires flashinfer-python==0.7.2.post1; the flashinfer pin is {LATER}"
    ]
