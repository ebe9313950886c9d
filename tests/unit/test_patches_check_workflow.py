"""The scheduled `patches check` workflow (fast; no network)."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from imgbuild.cli.patches import split_refs

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "patches-check.yml"


def test_scheduled_job_keeps_the_json_matrix_and_summarises_it() -> None:
    data = yaml.safe_load(WORKFLOW.read_text())
    triggers = data[True] if True in data else data["on"]  # YAML 1.1 reads `on:` as a boolean
    assert triggers["schedule"][0]["cron"] and "workflow_dispatch" in triggers
    steps = data["jobs"]["matrix"]["steps"]
    run = next(s["run"] for s in steps if "imgbuild patches check" in str(s.get("run", "")))
    assert "--onto $REFS --json | tee patches-check.json" in run and "pipefail" in run
    summary = next(s for s in steps if "$GITHUB_STEP_SUMMARY" in str(s.get("run", "")))
    assert summary["if"].startswith("always()") and "patches-check.json" in summary["run"]
    refs = next(s for s in steps if "imgbuild patches check" in str(s.get("run", "")))["env"]["REFS"]
    assert "latest" in refs
    line = next(ln for ln in run.splitlines() if ln.startswith("imgbuild"))
    words = shlex.split(line.replace("$REFS", "pinned latest"))
    at = words.index("--onto")
    assert split_refs([words[at + 1]], [words[at + 2]]) == ["pinned", "latest"]
