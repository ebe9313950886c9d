"""`imgbuild patches check --onto REF...`: the variant x ref x patch matrix."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from imgbuild.errors import UpstreamError
from imgbuild.project import Project
from imgbuild.shapes import dump
from imgbuild.workflows.matrix import check_onto
from tests.support import needs
from tests.support.jsonschema_check import load_json
from tests.support.rebase_world import PATCHES, build_upstream, project, snapshot
from tests.support.runner import imgbuild_captured as cli
from tests.support.synth import Upstream

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(upstream: Upstream) -> Upstream:
    return build_upstream(upstream)


def test_matrix_over_variants_and_refs(tmp_path: Path, world: Upstream) -> None:
    names = ["0002-arch-sm121.patch", "0003-config.patch", "0004-engram-disk.patch", "0006-sm121-engram-guard.patch"]
    proj = Project.load(project(tmp_path / "p", world, names, variants=True))
    matrix = check_onto(proj, ["v1", "v2", "v3"])
    cell = {(s, r, n): c.outcome for (s, r, n), c in matrix.cells.items()}
    assert cell[("series", "v1", "0002-arch-sm121")] == "exact"
    assert cell[("series", "v2", "0002-arch-sm121")] == "upstreamed"  # upstreamed in v2 ...
    assert cell[("series", "v3", "0002-arch-sm121")] == "exact"  # ... and reverted in v3
    assert cell[("series", "v2", "0003-config")] == "partly-upstreamed"
    assert matrix.cells[("series", "v2", "0004-engram-disk")].moves  # followed the directory rename
    # Engram x sm121 overlap: the guard patch needs the Engram patch under it.
    assert cell[("engram-mem", "v1", "0006-sm121-engram-guard")] == "conflict"
    assert matrix.stack_ok("series", "v2") and matrix.stack_ok("latest", "v3")
    assert not matrix.stack_ok("engram-mem", "v1") and not matrix.ok
    data = dump(matrix.checked())
    assert data["ok"] is False and [r["tag"] for r in data["refs"]] == ["v1", "v2", "v3"]
    variants = {v["variant"]: v for v in data["variants"]}
    assert set(variants) == {"series", "latest", "engram-mem"}
    # one spelling of patch names in every JSON document: the file name, as in patches/series
    assert variants["engram-mem"]["patches"] == [
        "0002-arch-sm121.patch",
        "0003-config.patch",
        "0006-sm121-engram-guard.patch",
    ]
    guard = variants["engram-mem"]["results"]["v1"]["patches"]["0006-sm121-engram-guard.patch"]
    assert guard["patch"] == "0006-sm121-engram-guard.patch" and guard["method"] == "conflict"


def test_check_is_in_memory(tmp_path: Path, world: Upstream) -> None:
    root = project(tmp_path / "p", world, list(PATCHES), variants=True)
    before = snapshot(root)
    check_onto(Project.load(root), ["v2", "v3"])
    assert snapshot(root) == before
    assert not (root / ".imgbuild-work" / "rebase").exists()


def test_cli_exit_codes_and_json(tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0002-arch-sm121.patch"])
    code, out, _ = cli(capsys, "-C", str(root), "patches", "check", "--onto", "v2", "v1", "--json")
    assert code == 0
    data = load_json(out)
    assert data["ok"] is True and [r["ref"] for r in data["refs"]] == ["v2", "v1"]
    code, out, _ = cli(capsys, "-C", str(root), "patches", "check", "--onto", "v3")
    assert code == 1 and "FAIL" in out  # 0001 conflicts on v3
    code, out, _ = cli(capsys, "-C", str(root), "patches", "check", "--onto", "v2", "--strict")
    assert code == 1  # upstreamed is not exact/offset
    code, _, err = cli(capsys, "-C", str(root), "patches", "check", "--onto", "nope")
    assert code == 6 and "'nope' is not a tag or commit" in err
    code, _, err = cli(capsys, "-C", str(root), "patches", "check", "v2")
    assert code == 2 and "--onto" in err
    # Without --onto: the old check of the pinned release, unchanged.
    code, out, _ = cli(capsys, "-C", str(root), "patches", "check", "--json")
    assert code == 0 and load_json(out)["upstream"]["tag"] == "v1"


def test_pinned_and_latest_words(tmp_path: Path, world: Upstream) -> None:
    proj = Project.load(project(tmp_path / "p", world, ["0003-config.patch"]))
    matrix = check_onto(proj, ["pinned", "latest"])
    assert [(r.ref, r.tag) for r in matrix.refs] == [("pinned", "v1"), ("latest", "v3")]


def test_commit_ref_gets_its_tag(tmp_path: Path, world: Upstream) -> None:
    from tests.support.synth import git

    proj = Project.load(project(tmp_path / "p", world, ["0003-config.patch"]))
    sha = git(world.path, "rev-parse", "v2").strip()
    check_onto(proj, ["v2"])  # fetch it first; a bare sha is then found in the cache
    matrix = check_onto(proj, [sha[:12]])
    assert matrix.refs[0].tag == "v2" and matrix.refs[0].commit == sha
    with pytest.raises(UpstreamError):
        check_onto(proj, ["0" * 40])


def test_table_names_the_conflicting_file_and_strict_upstreamed_is_not_a_failure(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0002-arch-sm121.patch"])
    code, out, _ = cli(capsys, "-C", str(root), "patches", "check", "--onto", "v3")
    assert code == 1 and "conflict: vllm/platforms/cuda.py" in out
    code, out, _ = cli(capsys, "-C", str(root), "patches", "check", "--onto", "v2", "--strict")
    assert code == 1  # strict: the patch files would change
    assert "FAIL" not in out and "does not carry" not in out and "CHANGES" in out
    assert "every variant carries, but some patch files would change" in out


def test_a_release_version_means_its_v_tag_for_a_git_source(tmp_path: Path, world: Upstream) -> None:
    proj = Project.load(project(tmp_path / "p", world, ["0003-config.patch"]))
    matrix = check_onto(proj, ["2"])  # the docs promise versions: 2 is v2 here
    assert [(r.ref, r.tag) for r in matrix.refs] == [("2", "v2")]
    with pytest.raises(UpstreamError, match="neither v9 nor 9 is a tag"):
        check_onto(proj, ["9"])


def test_the_scheduled_workflow_summarises_the_json_document(
    tmp_path: Path, world: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """.github/workflows/patches-check.yml keeps this --json document and puts each variant's verdict per
    ref in the job summary with jq: its step, run on what the CLI printed."""
    needs.tool("jq", "fast", "the patches-check workflow's job summary is written with it")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "patches-check.yml").read_text())
    step = next(s for s in workflow["jobs"]["check"]["steps"] if "GITHUB_STEP_SUMMARY" in str(s.get("run", "")))
    root = project(tmp_path / "p", world, ["0001-cuda-sm121.patch", "0002-arch-sm121.patch"])
    code, text, _ = cli(capsys, "-C", str(root), "patches", "check", "--onto", "latest")
    assert code == 1 and "latest is v3 (" in text, text  # which release `latest` is, said in words (issue 44)
    code, out, _ = cli(capsys, "-C", str(root), "patches", "check", "--onto", "v2", "latest", "--json")
    assert code == 1  # 0001 conflicts on v3
    (tmp_path / "patches-check-vllm.json").write_text(out)
    summary = tmp_path / "summary.md"
    summary.write_text("# an earlier step\n")
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "PIN": "vllm"}
    subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, check=True)
    assert summary.read_text() == (
        "# an earlier step\n"  # appended, as GitHub expects
        "## imgbuild patches check, vllm: ❌ not every variant carries\n\n"
        "| variant | v2 | latest (v3) |\n"
        "|---|---|---|\n"
        "| series | PASS | FAIL: 0001-cuda-sm121.patch |\n"
        "| latest | PASS | FAIL: 0001-cuda-sm121.patch |\n"
    )
    # a failure before any matrix: its error document
    (tmp_path / "patches-check-vllm.json").write_text(
        cli(capsys, "-C", str(root), "patches", "check", "--onto", "nope", "--json")[1]
    )
    subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, check=True)
    last = summary.read_text().splitlines()[-1]
    assert last.startswith("**imgbuild patches check (vllm) failed**: 'nope' is not a tag or commit of ")
