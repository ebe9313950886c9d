""".github/scripts/bump-pr.sh (what .github/workflows/patches-bump.yml runs) against a stand-in `gh` that records
what it is asked and answers `gh pr list` / `gh issue list` from canned JSON, a local bare repository as
`origin`, and the real `imgbuild patches bump --no-build` on the synthetic upstream of rebase_world."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.rebase_world import build_upstream, project
from tests.support.synth import ENV, Upstream, git

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".github" / "scripts" / "bump-pr.sh"
WORKFLOW = ROOT / ".github" / "workflows" / "patches-bump.yml"

GH = (ROOT / "tests" / "support" / "bin" / "gh").read_text()


@pytest.fixture
def world(upstream: Upstream) -> Upstream:
    return build_upstream(upstream)


class Site:
    """A project pushed to a bare `origin`, and the stand-ins on PATH."""

    def __init__(self, tmp: Path, world: Upstream, names: list[str], tag: str) -> None:
        self.tmp = tmp
        root = project(tmp / "seed", world, names, tag=tag)
        git(root, "init", "-q", "-b", "main")
        (root / ".gitignore").write_text("/.imgbuild-work/\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "the project")
        self.origin = tmp / "origin.git"
        git(tmp, "init", "-q", "--bare", "-b", "main", str(self.origin))
        git(root, "push", "-q", str(self.origin), "main")
        self.bin = tmp / "bin"
        self.bin.mkdir()
        (self.bin / "gh").write_text(GH)
        (self.bin / "imgbuild").write_text(f'#!/bin/sh\nexec {sys.executable} -m imgbuild "$@"\n')
        for tool in ("gh", "imgbuild"):
            (self.bin / tool).chmod(0o755)
        self.runs = 0

    def run(self, **canned: object) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], Path]:
        """The script in a fresh clone of origin (as a CI job has it); what it asked of gh."""
        self.runs += 1
        here = self.tmp / f"run{self.runs}"
        git(self.tmp, "clone", "-q", str(self.origin), str(here))
        log = self.tmp / f"gh{self.runs}.jsonl"
        env = {
            **os.environ,
            **ENV,
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
            "GH_LOG": str(log),
            "GH_TOKEN": "stand-in",
            "REPORT_DIR": str(self.tmp / f"report{self.runs}"),
            "BUMP_ARGS": "--no-build",
        }
        for name, value in canned.items():
            path = self.tmp / f"{name}{self.runs}.json"
            path.write_text(json.dumps(value))
            env[name] = str(path)
        done = subprocess.run(["bash", str(SCRIPT)], cwd=here, env=env, capture_output=True, text=True, check=False)
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return done, calls, here

    def remote_branches(self) -> list[str]:
        return git(self.origin, "for-each-ref", "--format=%(refname:short)", "refs/heads").split()


def opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_a_clean_bump_is_pushed_as_a_pull_request_once(tmp_path: Path, world: Upstream) -> None:
    site = Site(tmp_path, world, ["0002-arch-sm121.patch", "0003-config.patch", "0004-engram-disk.patch"], "v1")
    done, calls, _ = site.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "v1 → v3 on branch imgbuild/bump-v3" in done.stdout
    # the branch is on origin, with the rebased series and the new pin
    assert site.remote_branches() == ["imgbuild/bump-v3", "main"]
    pin = yaml.safe_load(git(site.origin, "show", "imgbuild/bump-v3:patches/upstream.yaml"))
    assert pin["tag"] == "v3" and pin["commit"] == git(world.path, "rev-parse", "v3").strip()
    # gh: asked for an existing PR first, then one PR with the review report as its body
    verbs = [c["argv"][:2] for c in calls]
    assert verbs == [["pr", "list"], ["label", "create"], ["pr", "create"]]
    assert opt(calls[0]["argv"], "--head") == "imgbuild/bump-v3" and opt(calls[0]["argv"], "--state") == "all"
    create = calls[-1]
    argv = create["argv"]
    assert opt(argv, "--title") == "vLLM v3: carry the patch series"
    assert opt(argv, "--label") == "vllm-bump" and opt(argv, "--base") == "main"
    assert opt(argv, "--head") == "imgbuild/bump-v3"
    body = create["body"]
    assert body.startswith("# Rebase of the patch series: v1 → v3")
    assert "new pin: `v3`" in body and "Range-diff" in body and "0004-engram-disk.patch" in body
    assert "| `0003-config.patch` | partly-upstreamed |" in body
    # idempotent: with the branch on origin, a second run does nothing
    done, calls, _ = site.run()
    assert done.returncode == 0, done.stderr
    assert "already on origin: nothing to do" in done.stdout and calls == []
    # ... and with the branch gone but its pull request there (merged or closed), nothing either
    git(site.origin, "branch", "-D", "imgbuild/bump-v3")
    done, calls, _ = site.run(GH_PRS=[{"number": 7, "url": "https://github.invalid/o/r/pull/7"}])
    assert done.returncode == 0, done.stderr
    assert "exists already: nothing to do" in done.stdout
    assert [c["argv"][:2] for c in calls] == [["pr", "list"]]
    assert site.remote_branches() == ["main"]


def test_a_conflict_opens_one_issue_then_updates_it(tmp_path: Path, world: Upstream) -> None:
    site = Site(tmp_path, world, ["0001-cuda-sm121.patch", "0003-config.patch"], "v2")
    done, calls, _ = site.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stopped at a conflict in 0001-cuda-sm121.patch" in done.stdout
    assert site.remote_branches() == ["main"]  # nothing pushed
    verbs = [c["argv"][:2] for c in calls]
    assert verbs == [["pr", "list"], ["issue", "list"], ["label", "create"], ["issue", "create"]]
    title = "vLLM v3: the patch series needs a hand"
    listed = calls[1]["argv"]
    assert opt(listed, "--label") == "vllm-bump" and title in opt(listed, "--search")
    create = calls[-1]
    assert opt(create["argv"], "--title") == title and opt(create["argv"], "--label") == "vllm-bump"
    body = create["body"]
    for part in (
        "imgbuild patches bump --onto v3",
        "imgbuild patches rebase --continue",
        "git push origin imgbuild/bump-v3",
        "### `vllm/platforms/cuda.py`, hunk #2 `@@ -22,7 +17,7 @@`",
        "cuda 20 upstream style",
        "cuda 20 sm121",
        "change 0001-cuda-sm121.patch",  # its DEP-3 Description
    ):
        assert part in body, part
    # the next day: the issue is there; it is edited, not opened again
    done, calls, _ = site.run(GH_ISSUES=[{"number": 12, "title": title}, {"number": 3, "title": title + " (old)"}])
    assert done.returncode == 0, done.stdout + done.stderr
    verbs = [c["argv"][:2] for c in calls]
    assert verbs == [["pr", "list"], ["issue", "list"], ["issue", "edit"]]
    assert calls[-1]["argv"][2] == "12" and "hunk #2" in calls[-1]["body"]
    assert "updated issue #12" in done.stdout


def test_the_workflow_runs_the_script_with_the_least_it_needs() -> None:
    data = yaml.safe_load(WORKFLOW.read_text())
    on = data[True]  # YAML 1.1 reads `on:` as a boolean
    assert on["schedule"][0]["cron"] and "workflow_dispatch" in on
    assert data["permissions"] == {"contents": "read"}
    assert list(data["jobs"]) == ["pins", "bump"] and "permissions" not in data["jobs"]["pins"]
    job = data["jobs"]["bump"]
    assert job["strategy"]["matrix"]["pin"] == "${{ fromJSON(needs.pins.outputs.pins) }}"
    assert job["permissions"] == {"contents": "write", "pull-requests": "write", "issues": "write"}
    step = next(s for s in job["steps"] if "bump-pr.sh" in str(s.get("run", "")))
    assert step["env"]["GH_TOKEN"] == "${{ github.token }}" and "REPORT_DIR" in step["env"]
    script = SCRIPT.read_text()
    assert '"$imgbuild" patches bump --json --report-dir "$report_dir"' in script
    assert "gh pr create" in script and "gh issue edit" in script and "gh issue list" in script
