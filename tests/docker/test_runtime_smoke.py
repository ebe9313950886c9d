"""Smoke on the runtime base (torch and vLLM's requirements, so `import vllm` works): the import checks.

Both variants of the real project, built on the amd64 runtime base (native here),
pass every import check: each patched module, each module of the release that
imports one of them, and `vllm --version`. A patch that byte-compiles but fails at
import (`from vllm.platforms import no_such_name`) fails smoke, naming the module
and the missing name. The runtime base is built once (see test_runtime_base.py).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from imgbuild.project import Project
from tests.docker.conftest import run_cli
from tests.support.jsonschema_check import load_json

pytestmark = [
    pytest.mark.docker,
    pytest.mark.release,
]
ROOT = Path(__file__).resolve().parents[2]
PLATFORM = "linux/amd64"
BROKEN_FILE = "vllm/model_executor/layers/sparse_attn_indexer.py"  # patched by 0004 (sm12x): both variants keep it
BROKEN_LINE = "from vllm.platforms import no_such_name  # broken on purpose: compiles, fails at import\n"


def runtime_base() -> None:
    proc = run_cli(ROOT, "skeleton", "--runtime", "--platform", PLATFORM, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout


def checks(stdout: str) -> list[dict[str, str]]:
    return [{**c, "platform": r["platform"]} for r in load_json(stdout)["reports"] for c in r["checks"]]


@pytest.fixture(scope="module")
def built(prefix: str) -> str:
    runtime_base()
    repo = f"{prefix}-runtime/vllm-dsv41"
    args = ("latest", "engram-mem", "--base", "runtime", "--platform", PLATFORM, "--repository", repo)
    proc = run_cli(ROOT, "build", *args, "--no-smoke")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return repo


def test_both_variants_pass_every_import_check(built: str) -> None:
    proc = run_cli(ROOT, "smoke", "latest", "engram-mem", "--base", "runtime", "--platform", PLATFORM, "--repository",
                   built, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    found = checks(proc.stdout)
    imports = [c for c in found if c["group"] == "import"]
    assert len({c["name"] for c in imports}) > 7 + 1  # the seven, their importers, `vllm --version`
    assert not [c for c in found if c["status"] == "fail"]
    patched = Project.load(ROOT).plan(["latest"])[0].files
    for f in patched:
        module = "import " + f.path.removesuffix(".py").replace("/", ".")
        assert [c["status"] for c in imports if c["name"] == module] == ["pass", "pass"], module
    version = [c for c in imports if c["name"] == "vllm --version"]
    assert [c["status"] for c in version] == ["pass", "pass"] and Project.load(ROOT).pin.version in version[0]["detail"]


def broken_project(dest: Path) -> Path:
    """The real project plus one patch (group sm12x) that adds an import of a name vllm.platforms lacks."""
    for part in ("patches", "images", "deploy", "pyproject.toml"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / part)
    before = Project.load(ROOT).plan(["latest"])[0].contents[BROKEN_FILE]
    work = dest.parent / "diff"
    for side, data in (("a", before), ("b", before + BROKEN_LINE.encode())):
        (work / side / BROKEN_FILE).parent.mkdir(parents=True, exist_ok=True)
        (work / side / BROKEN_FILE).write_bytes(data)
    diff = subprocess.run(
        ["git", "diff", "--no-index", "--full-index", "--no-prefix", f"a/{BROKEN_FILE}", f"b/{BROKEN_FILE}"],
        cwd=work, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    assert diff.startswith(f"diff --git a/{BROKEN_FILE} b/{BROKEN_FILE}"), diff[:300]
    header = (
        "Description: a deliberately broken import (test)\n"
        "Author: imgbuild tests <tests@example.invalid>\n"
        "Upstream-Status: Inappropriate\n"
        "Forwarded: not-needed\n"
        "Group: sm12x\n"
        "Last-Update: 2026-12-01\n"
        "---\n"
    )
    (dest / "patches" / "0099-broken-import.patch").write_text(header + diff)
    with (dest / "patches" / "series").open("a") as fh:
        fh.write("0099-broken-import.patch\n")
    return dest


def test_a_patch_that_compiles_but_fails_at_import_fails_smoke(prefix: str, tmp_path: Path) -> None:
    runtime_base()
    project = broken_project(tmp_path / "project")
    repo = f"{prefix}-broken/vllm-dsv41"
    base = ("--base", "runtime", "--platform", PLATFORM, "--repository", repo)
    proc = run_cli(project, "build", "latest", *base, "--no-smoke")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_cli(project, "smoke", "latest", *base, "--json")
    assert proc.returncode == 8, proc.stdout[-3000:] + proc.stderr[-2000:]
    failed = {c["name"]: c["detail"] for c in checks(proc.stdout) if c["status"] == "fail"}
    # The first module to load the broken file names the cause; later ones may fail with what the
    # half-imported module left behind (a torch op registered twice, a partial module), still failing.
    missing = "ImportError: cannot import name 'no_such_name' from 'vllm.platforms'"
    cause = [(name, d) for name, d in failed.items() if d.startswith(missing) and f"{BROKEN_FILE}:" in d]
    assert cause, failed
    assert "import vllm.model_executor.layers.sparse_attn_indexer" in failed, sorted(failed)
    compiled = [c for c in checks(proc.stdout) if c["name"] == f"compile {BROKEN_FILE}"]
    assert [c["status"] for c in compiled] == ["pass"]  # byte-compiling alone would not have caught it
