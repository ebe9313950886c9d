"""Smoke tests run side by side (images/smokequeue.py), yet a build ends as when they ran one after the other.

The two synthetic variants are built in plan order, latest then engram-mem; their smoke
containers overlap. Whichever fails, the tags end as the sequential build left them: the
images before the failing one moved, the failing one's and every later one's put back, and
what is printed comes in plan order.
"""

from __future__ import annotations

import json

import pytest

from imgbuild.images.docker import CONTAINER_LABEL, Engine
from tests.docker.conftest import MakeProject
from tests.docker.test_failures import tags_of
from tests.support.runner import Cli, ctrl_c
from tests.support.synth import Upstream

pytestmark = pytest.mark.docker

# latest sets DSV41_ENGRAM_DISK=1 and engram-mem unsets it: one command fails on exactly one of them
FAILS_ON_LATEST = 'python3 -c \'import os, sys; sys.exit(os.environ.get("DSV41_ENGRAM_DISK") == "1")\''
FAILS_ON_ENGRAM_MEM = 'python3 -c \'import os, sys; sys.exit(os.environ.get("DSV41_ENGRAM_DISK") != "1")\''


def image_tags(engine: Engine, repo: str) -> set[str]:
    """The variant images' tags (moving and immutable), not the layer images'."""
    return {t for t in tags_of(engine, repo) if not t.split(":")[1].startswith("layer-")}


def test_first_image_failing_leaves_every_tag_as_before(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str, synth_upstream: Upstream
) -> None:
    project = make_project("firstfails", skeleton_commands=[FAILS_ON_LATEST])
    repo = f"{prefix}-firstfails"
    proc = cli(project, "build", "latest", "engram-mem", "--base", "skeleton")
    assert proc.returncode == 8, proc.stderr
    assert f"{repo}:1.0.0-" in proc.stderr and "failed its smoke test (1 failing checks: command " in proc.stderr
    assert f"exit 1: ); {repo}:latest left unchanged" in proc.stderr
    assert "engram-mem left unchanged" not in proc.stderr
    # engram-mem was built (and smoke-tested) meanwhile, but the sequential build never got to it
    assert "engram-mem: building" not in proc.stderr and "engram-mem: smoke-testing" not in proc.stderr
    titles = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("smoke ")]
    assert len(titles) == 1 and f"{repo}:1.0.0-" in titles[0], proc.stdout  # engram-mem's report is not shown
    assert image_tags(engine, repo) == set()
    label = f"imgbuild.upstream.url={synth_upstream.url}"
    assert engine.client.containers.list(all=True, filters={"label": label}) == []  # both smoke containers gone


def test_second_image_failing_moves_the_first_ones_tags_only(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str
) -> None:
    project = make_project("secondfails", skeleton_commands=[FAILS_ON_ENGRAM_MEM])
    repo = f"{prefix}-secondfails"
    proc = cli(project, "build", "latest", "engram-mem", "--base", "skeleton")
    assert proc.returncode == 8, proc.stderr
    assert f"); {repo}:engram-mem left unchanged" in proc.stderr
    assert "latest left unchanged" not in proc.stderr
    tags = image_tags(engine, repo)
    immutable = {t for t in tags if ":1.0.0-" in t}
    assert f"{repo}:latest" in tags and len(immutable) == 1 and tags == {f"{repo}:latest", *immutable}
    assert engine.require(f"{repo}:latest").id == engine.require(immutable.pop()).id


def test_a_passing_build_reports_in_plan_order(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str
) -> None:
    project = make_project("smokeorder")
    repo = f"{prefix}-smokeorder"
    proc = cli(project, "build", "latest", "engram-mem", "--base", "skeleton")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(("latest:", "engram-mem:"))]
    assert [ln.split(" ")[0] + " " + ln.split(" ")[1] for ln in lines] == [
        "latest: building",
        "latest: smoke-testing",
        "engram-mem: building",
        "engram-mem: smoke-testing",
    ], proc.stderr
    titles = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("smoke ")]
    assert len(titles) == 2 and repo + ":1.0.0-" in titles[0], proc.stdout
    first, second = (t.split()[1] for t in titles)
    assert engine.require(f"{repo}:latest").id == engine.require(first).id
    assert engine.require(f"{repo}:engram-mem").id == engine.require(second).id
    again = cli(project, "build", "latest", "engram-mem", "--base", "skeleton", "--force", "--json")
    assert again.returncode == 0, again.stderr
    images = json.loads(again.stdout)["images"]
    assert [i["variant"] for i in images] == ["latest", "engram-mem"]
    assert all(i["smoke"]["ok"] and i["smoke"]["variant"] == i["variant"] for i in images)


def test_ctrl_c_while_both_smokes_run_leaves_no_tag_and_no_container(
    make_project: MakeProject, engine: Engine, prefix: str, synth_upstream: Upstream
) -> None:
    project = make_project("interrupt2")
    repo = f"{prefix}-interrupt2"
    # latest's smoke container runs; engram-mem builds or smokes beside it
    args = ("build", "latest", "engram-mem", "--base", "skeleton")
    done = ctrl_c(project, *args, when="latest: smoke-testing", after=0.8)
    assert done.returncode == 130, done.stderr
    assert "interrupted; nothing was changed" in done.stderr and "Traceback" not in done.stderr
    assert image_tags(engine, repo) == set()
    owned = f"{CONTAINER_LABEL}={done.pid}"
    assert engine.client.containers.list(all=True, filters={"label": owned}) == []
    label = f"imgbuild.upstream.url={synth_upstream.url}"
    assert engine.client.containers.list(all=True, filters={"label": label}) == []
