"""The scheduled `patches check` workflow (fast; no network): the refs it passes are ones `--onto` reads.
(tests/docker/test_workflows_act.py runs the workflow itself under act.)"""

from __future__ import annotations

from pathlib import Path

import yaml

from imgbuild.cli.patches.app import split_refs

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "patches-check.yml"


def test_the_default_refs_are_refs_that_onto_reads() -> None:
    data = yaml.safe_load(WORKFLOW.read_text())
    triggers = data[True] if True in data else data["on"]  # YAML 1.1 reads `on:` as a boolean
    assert triggers["schedule"][0]["cron"] and "workflow_dispatch" in triggers
    assert triggers["workflow_dispatch"]["inputs"]["refs"]["default"] == "pinned latest"
    step = next(s for s in data["jobs"]["check"]["steps"] if "imgbuild patches check" in str(s.get("run", "")))
    assert step["env"]["REFS"] == "${{ github.event.inputs.refs || 'pinned latest' }}" and "pipefail" in step["run"]
    default = triggers["workflow_dispatch"]["inputs"]["refs"]["default"]
    first, *more = default.split(" ")
    assert split_refs([first], more) == ["pinned", "latest"]
