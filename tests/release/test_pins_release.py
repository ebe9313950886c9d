"""vLLM 0.34.0 from the package index requires flashinfer-python==0.7.3, which the index lacks (it has 0.7.2.post1
and 0.7.4): `check --onto` names it, `patches bump` stops before changing anything, and with an override written
in patches/upstream.yaml it moves the FlashInfer pin with vLLM. At the first stop (0002) the rest of the carry
is previewed: 0003 exact, 0004-0007 conflicting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.jsonschema_check import load_json
from tests.support.release_033 import checkout_0_33_0

pytestmark = pytest.mark.release
ROOT = Path(__file__).resolve().parents[2]
ONTO = "0.34.0"
NEED = "vLLM 0.34.0 requires flashinfer-python==0.7.3; the flashinfer pin is 0.7.2.post1"
OVERRIDE = (
    "    override:\n"
    '      requirement: "flashinfer-python==0.7.3"\n'
    '      version: "0.7.4"\n'
    "      reason: the package index has no 0.7.3; 0.7.4 is the release after it\n"
)


def imgbuild(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(root), *args], capture_output=True, text=True, check=False
    )


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout


def copy(tmp_path: Path, override: bool = False) -> Path:
    """The project at vLLM 0.33.0 (tests/support/release_033.py), with the override written and committed."""
    root = checkout_0_33_0(tmp_path / "proj")
    if override:
        pins = root / "patches" / "upstream.yaml"
        pins.write_text(pins.read_text() + OVERRIDE)
        git(root, "commit", "-qam", "the override")
    return root


def test_check_onto_names_the_requirement(tmp_path: Path) -> None:
    out = imgbuild(copy(tmp_path), "patches", "check", "--onto", ONTO, "--json")
    assert out.returncode == 1, out.stderr  # the patches do not carry yet
    [need] = load_json(out.stdout)["requirements"][ONTO]
    assert need["status"] == "mismatch" and need["message"] == NEED


def test_bump_without_an_override_stops_before_changing_anything(tmp_path: Path) -> None:
    root = copy(tmp_path)
    before = (root / "patches" / "upstream.yaml").read_text()
    out = imgbuild(root, "patches", "bump", "--onto", ONTO, "--no-build", "--json")
    assert out.returncode == 6, out.stderr + out.stdout
    error = load_json(out.stdout)["error"]
    assert error["message"].startswith(NEED + ", and the package index has no release that meets it (it has: ")
    assert "0.7.4" in error["index_versions"] and "0.7.3" not in error["index_versions"]
    assert "wait" in error["hint"] and "override:" in error["hint"] and "reason:" in error["hint"]
    assert git(root, "status", "--porcelain") == ""
    assert git(root, "branch", "--format=%(refname:short)").split() == ["main"]
    assert (root / "patches" / "upstream.yaml").read_text() == before
    assert not (root / ".imgbuild-work" / "rebase").exists()


def test_a_rebase_stop_previews_the_rest_of_the_carry(tmp_path: Path) -> None:
    root = copy(tmp_path)
    out = imgbuild(root, "patches", "rebase", "--onto", ONTO, "--json")
    assert out.returncode == 5, out.stderr + out.stdout
    stopped = load_json(out.stdout)["error"]["stopped"]
    assert stopped["filename"] == "0002-sm12x-flashinfer-sparse-pages.patch"
    kinds = {p["filename"][:4]: p["kind"] for p in stopped["pending"]}
    assert kinds == {"0003": "exact", "0004": "conflicting", "0005": "conflicting", "0006": "conflicting",
                     "0007": "conflicting"}  # fmt: skip
    assert all(p["conflicting_hunks"] for p in stopped["pending"] if p["kind"] == "conflicting")
    assert "still to carry" in out.stderr and "0004-sm12x-indexer-decode-topk-per-row.patch: conflicting" in out.stderr


def test_bump_with_the_override_moves_flashinfer_and_previews_the_carry(tmp_path: Path) -> None:
    root = copy(tmp_path, override=True)
    out = imgbuild(root, "patches", "bump", "--onto", ONTO, "--no-build", "--json",
                   "--report-dir", str(tmp_path / "r"))  # fmt: skip
    assert out.returncode == 5, out.stderr + out.stdout  # 0002 conflicts
    doc = load_json(out.stdout)
    [moved] = doc["pins"]
    assert (moved["pin"], moved["old"], moved["new"]) == ("flashinfer", "0.7.2.post1", "0.7.4")
    assert moved["override"]["version"] == "0.7.4"
    assert [p["kind"] for p in doc["pending"]] == ["exact", *["conflicting"] * 4]
    assert "still to carry: 1 exact, 4 conflicting" in doc["message"]
    md = (tmp_path / "r" / f"bump-v{ONTO}.md").read_text()
    assert (
        "## Still to carry" in md
        and "- pin moved with it: the flashinfer pin moves 0.7.2.post1 -> the override's 0.7.4" in md
    )
