"""Several upstreams in one stack (issue 26): pins under `also:`, `Upstream:` in a patch's header, check,
plan, labels, `check --onto NAME=REF` and `rebase --onto NAME=REF` on two synthetic upstreams."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from imgbuild.config.models import load_pins
from imgbuild.errors import ConfigError, PatchError
from imgbuild.plan import labels
from imgbuild.plan.builds import BaseInfo, make_build_plan
from imgbuild.plan.dockerfile import listing
from imgbuild.plan.inputs import project_inputs
from imgbuild.platforms import Platform
from imgbuild.project import PinnedTrees, Project
from imgbuild.workflows.matrix import check_onto
from imgbuild.workflows.writeback import rewrite_pin_named
from tests.support.jsonschema_check import load_json
from tests.support.runner import imgbuild_here
from tests.support.synth import Upstream, git, header, numbered

ARM = Platform.parse("linux/arm64")


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return imgbuild_here(None, "-C", str(root), *args)


FI_OLD = numbered(30, "fi")
FI_NEW = "moved 1\nmoved 2\n" + FI_OLD  # 0.2: two lines on top, so the patch lands at an offset


def _pin(up: Upstream, name: str, tag: str) -> dict[str, object]:
    commit = git(up.path, "rev-parse", f"{tag}^{{commit}}").strip()
    return {"name": name, "package_root": name, "tag": tag, "commit": commit, "source": {"kind": "git", "url": up.url}}


@pytest.fixture
def world(tmp_path: Path) -> tuple[Upstream, Upstream, Path]:
    """vllm (v1) and flashinfer (0.1, then 0.2 with the patched lines moved), and a project on both."""
    vllm = Upstream(tmp_path / "vllm-up")
    vllm.release(
        "v1", {"vllm/__init__.py": "", "vllm/a.py": numbered(20, "a"), "vllm/uses_a.py": "from vllm import a\n"}
    )
    vllm.release("v2", {"vllm/a.py": "new 1\n" + numbered(20, "a")})
    vllm.release("v3", {"vllm/a.py": numbered(20, "a").replace("a 10\n", "a ten\n")})  # the patched line
    fi = Upstream(tmp_path / "fi-up")
    fi.release("0.1", {"flashinfer/__init__.py": "", "flashinfer/policy.py": FI_OLD})
    fi.release("0.2", {"flashinfer/policy.py": FI_NEW})
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "images").mkdir()
    first = _pin(vllm, "vllm", "v1")
    text = "# two upstreams\n" + yaml.safe_dump(first, sort_keys=False)
    text += "also:\n" + "".join(
        ("  - " if i == 0 else "    ") + line + "\n"
        for i, line in enumerate(yaml.safe_dump(_pin(fi, "flashinfer", "0.1"), sort_keys=False).splitlines())
    )
    (root / "patches" / "upstream.yaml").write_text(text)
    vdiff = vllm.diff("v1", {"vllm/a.py": numbered(20, "a").replace("a 10\n", "a 10 patched\n")})
    fdiff = fi.diff("0.1", {"flashinfer/policy.py": FI_OLD.replace("fi 15\n", "fi 15 patched\n")})
    (root / "patches" / "0001-vllm.patch").write_text(header("vllm change", "core") + vdiff)
    fi_header = header("flashinfer change", "fi").replace("Group: fi\n", "Upstream: flashinfer\nGroup: fi\n")
    (root / "patches" / "0002-flashinfer.patch").write_text(fi_header + fdiff)
    (root / "patches" / "series").write_text("0001-vllm.patch\n0002-flashinfer.patch\n")
    (root / "images" / "latest.yaml").write_text(yaml.safe_dump({"name": "latest", "image": {"repository": "t"}}))
    (root / "images" / "no-fi.yaml").write_text(yaml.safe_dump({"name": "no-fi", "from": "latest", "revert": ["fi"]}))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project")
    return vllm, fi, root


def test_pins_and_the_upstream_field(world: tuple[Upstream, Upstream, Path]) -> None:
    _, _, root = world
    pins = load_pins(root / "patches" / "upstream.yaml")
    assert [p.name for p in pins] == ["vllm", "flashinfer"]
    project = Project.load(root)
    assert project.pin == pins[0] and project.multi
    assert [project.upstream_of(p).name for p in project.patches] == ["vllm", "flashinfer"]
    assert isinstance(project.tree(), PinnedTrees)
    assert project.tree().read("flashinfer/policy.py") == FI_OLD.encode()
    assert project.tree().read("vllm/a.py") == numbered(20, "a").encode()


def test_a_patch_is_held_to_its_upstream(world: tuple[Upstream, Upstream, Path]) -> None:
    _, _, root = world
    path = root / "patches" / "0002-flashinfer.patch"
    path.write_text(path.read_text().replace("Upstream: flashinfer\n", ""))  # now the first pin's: vllm/ only
    with pytest.raises(PatchError, match="outside the package root vllm/"):
        Project.load(root)
    path.write_text(path.read_text().replace("Group: fi\n", "Upstream: flashinfr\nGroup: fi\n"))
    with pytest.raises(PatchError, match=r"unknown upstream 'flashinfr'.*did you mean 'flashinfer'"):
        Project.load(root)


def test_duplicate_pins_are_refused(world: tuple[Upstream, Upstream, Path]) -> None:
    _, _, root = world
    pins = root / "patches" / "upstream.yaml"
    pins.write_text(pins.read_text().replace("name: flashinfer", "name: vllm"))
    with pytest.raises(ConfigError, match="two upstreams have name 'vllm'"):
        Project.load(root)


def test_check_reports_each_upstream(world: tuple[Upstream, Upstream, Path]) -> None:
    _, _, root = world
    out = cli(root, "patches", "check", "--json")
    assert out.returncode == 0, out.stderr
    report = load_json(out.stdout)
    assert [u["name"] for u in report["upstreams"]] == ["vllm", "flashinfer"]
    assert [(p["patch"], p["upstream"], p["method"]) for p in report["patches"]] == [
        ("0001-vllm.patch", "vllm", "exact"),
        ("0002-flashinfer.patch", "flashinfer", "exact"),
    ]
    assert report["variants"]["no-fi"]["patches"] == ["0001-vllm.patch"]
    human = cli(root, "patches", "check")
    assert "series on vllm v1" in human.stdout and "series on flashinfer 0.1" in human.stdout
    listed = load_json(cli(root, "patches", "list", "--json").stdout)
    assert [p["upstream"] for p in listed["patches"]] == ["vllm", "flashinfer"]
    status = load_json(cli(root, "patches", "status", "--json").stdout)
    assert [u["name"] for u in status["upstreams"]] == ["vllm", "flashinfer"]
    plan = load_json(cli(root, "plan", "--json").stdout)
    assert [(u["name"], u["package_root"]) for u in plan["upstreams"]] == [
        ("vllm", "vllm"),
        ("flashinfer", "flashinfer"),
    ]


def _files(context: bytes) -> set[str]:
    return {e.name for e in listing(context) if e.kind == "file" and e.name != "Dockerfile"}


def test_layers_and_labels_hold_every_upstream(world: tuple[Upstream, Upstream, Path]) -> None:
    _, _, root = world
    project = Project.load(root)
    plans = project.plan()
    site = "/usr/lib/python3/dist-packages"
    bases = {(v, ARM): BaseInfo("base:1", "sha256:b", None, ARM, site) for v in project.variants}
    bp = make_build_plan(project_inputs(project), plans, bases, project.select(["latest", "no-fi"]))
    # no-fi (vllm only) is the bottom layer, latest adds flashinfer's file on top: a revert adds no layer
    images = {ib.variant: ib for ib in bp.images}
    bottom, top = images["latest"].layers
    assert images["no-fi"].layers == (bottom,)
    assert _files(images["latest"].context) == {f"layers/{bottom}/vllm/a.py", f"layers/{top}/flashinfer/policy.py"}
    latest = [p for p in plans if p.variant.name == "latest"]
    alone = make_build_plan(
        project_inputs(project), latest, {("latest", ARM): bases[("latest", ARM)]}, project.select(["latest"])
    )
    (one,) = alone.images[0].layers  # both roots in one layer: one directory, so still one COPY
    assert _files(alone.images[0].context) == {f"layers/{one}/flashinfer/policy.py", f"layers/{one}/vllm/a.py"}
    assert [ln for ln in alone.images[0].dockerfile.splitlines() if ln.startswith("COPY")] == [
        f"COPY layers/{one}/ {site}/"
    ]
    ups = json.loads(images["latest"].labels[labels.UPSTREAMS])
    assert [(u["name"], u["tag"], u["patches"]) for u in ups] == [
        ("vllm", "v1", ["0001-vllm"]),
        ("flashinfer", "0.1", ["0002-flashinfer"]),
    ]
    no_fi = json.loads(images["no-fi"].labels[labels.UPSTREAMS])
    assert [u["patches"] for u in no_fi] == [["0001-vllm"], []]
    assert images["latest"].labels["imgbuild.upstream.tag"] == "v1"  # the first pin keeps the old keys


def test_check_onto_moves_only_the_named_upstream(world: tuple[Upstream, Upstream, Path]) -> None:
    _, _, root = world
    project = Project.load(root)
    matrix = check_onto(project, ["flashinfer=0.2"])
    cells = {(s, n): c.outcome for (s, _r, n), c in matrix.cells.items()}
    assert cells == {("series", "0002-flashinfer"): "offset", ("latest", "0002-flashinfer"): "offset"}
    assert matrix.ok and matrix.refs[0].upstream == "flashinfer" and matrix.refs[0].tag == "0.2"
    out = cli(root, "patches", "check", "--onto", "flashinfer=0.2", "--onto", "vllm=v1", "--json")
    assert out.returncode == 0, out.stderr
    data = load_json(out.stdout)
    assert [(r["ref"], r["upstream"]) for r in data["refs"]] == [("flashinfer=0.2", "flashinfer"), ("vllm=v1", "vllm")]
    series = next(v for v in data["variants"] if v["variant"] == "series")
    assert list(series["results"]["flashinfer=0.2"]["patches"]) == ["0002-flashinfer.patch"]
    assert list(series["results"]["vllm=v1"]["patches"]) == ["0001-vllm.patch"]
    bad = cli(root, "patches", "check", "--onto", "flashinfr=0.2", "--json")
    assert bad.returncode == 3 and "did you mean 'flashinfer'" in bad.stdout


def test_rebase_onto_a_named_upstream(world: tuple[Upstream, Upstream, Path]) -> None:
    _, _, root = world
    before_vllm = (root / "patches" / "0001-vllm.patch").read_bytes()
    pins_before = (root / "patches" / "upstream.yaml").read_text()
    out = cli(root, "patches", "rebase", "--onto", "flashinfer=0.2", "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    project = Project.load(root)
    assert project.pin_named("flashinfer").tag == "0.2" and project.pin_named("vllm").tag == "v1"
    assert (root / "patches" / "0001-vllm.patch").read_bytes() == before_vllm  # not moved, not touched
    after = (root / "patches" / "upstream.yaml").read_text()
    assert after.startswith(pins_before.split("also:")[0])  # the first pin's lines as they were
    assert "@@ -14,7 +14,7 @@" in (root / "patches" / "0002-flashinfer.patch").read_text()  # re-exported at its offset
    check = load_json(cli(root, "patches", "check", "--json").stdout)
    assert check["ok"] and [p["method"] for p in check["patches"]] == ["exact", "exact"]


def test_rebase_onto_two_upstreams_one_after_the_other(world: tuple[Upstream, Upstream, Path]) -> None:
    _, _, root = world
    twice = cli(root, "patches", "rebase", "--onto", "flashinfer=0.2", "--onto", "flashinfer=0.2")
    assert twice.returncode == 2 and "names the upstream flashinfer more than once" in twice.stderr
    out = cli(root, "patches", "rebase", "--onto", "flashinfer=0.2", "--onto", "vllm=v2", "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    done = load_json(out.stdout)
    assert done["upstream"] == "vllm" and done["onto"]["tag"] == "v2"
    assert [(d["upstream"], d["onto"]["tag"]) for d in done["earlier"]] == [("flashinfer", "0.2")]
    project = Project.load(root)
    assert [p.tag for p in project.pins] == ["v2", "0.2"]
    check = load_json(cli(root, "patches", "check", "--json").stdout)
    assert check["ok"] and [p["method"] for p in check["patches"]] == ["exact", "exact"]


def test_rewrite_pin_named_edits_one_pin_in_place() -> None:
    text = (
        "# pins\nname: vllm\ntag: v1\ncommit: " + "a" * 40 + "\nsource:\n  kind: git\n  url: /x\n"
        "also:\n  # flashinfer, from git\n  - name: flashinfer\n    package_root: flashinfer\n    tag: '0.1'\n"
        "    commit: " + "b" * 40 + "\n    source:\n      kind: git\n      url: /y\n"
    )
    path_pins = yaml.safe_load(text)
    from imgbuild.config.models import UpstreamPin

    fi = UpstreamPin.model_validate(path_pins["also"][0])
    out = rewrite_pin_named(text, fi, {"tag": "0.2", "commit": "c" * 40}, {})
    assert out == text.replace("tag: '0.1'", "tag: '0.2'").replace("b" * 40, "c" * 40)
    first = UpstreamPin.model_validate({k: v for k, v in path_pins.items() if k != "also"})
    out = rewrite_pin_named(text, first, {"tag": "v2", "commit": "d" * 40}, {})
    assert out == text.replace("tag: v1", "tag: v2").replace("a" * 40, "d" * 40)
    assert json.dumps(yaml.safe_load(out)["also"]) == json.dumps(path_pins["also"])


def test_edit_and_refresh_keep_the_other_pins_patches(world: tuple[Upstream, Upstream, Path]) -> None:
    from imgbuild.workflows import queue as pq

    _, _, root = world
    series = (root / "patches" / "series").read_text()
    fi_patch = (root / "patches" / "0002-flashinfer.patch").read_bytes()
    opened = pq.open_queue(root)
    assert opened.commits == 1  # the first pin's patches: the work tree holds vllm's release only
    tree = opened.work_tree
    (tree / "vllm/a.py").write_text((tree / "vllm/a.py").read_text() + "extra = 1\n")
    git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "Add a knob\n\nWhy.\n\nGroup: core")
    result = pq.refresh(root, date="2027-01-01", close=True)
    assert result.added == ["0003-add-a-knob.patch"] and result.removed == []
    assert (root / "patches" / "0002-flashinfer.patch").read_bytes() == fi_patch
    assert (root / "patches" / "series").read_text() == series + "0003-add-a-knob.patch\n"
    check = load_json(cli(root, "patches", "check", "--json").stdout)
    assert check["ok"] and [p["upstream"] for p in check["patches"]] == ["vllm", "flashinfer", "vllm"]


def test_edit_and_refresh_a_further_pins_patches(world: tuple[Upstream, Upstream, Path]) -> None:
    """`patches edit --upstream flashinfer`: its patches on its release; a new commit there becomes a patch that
    names its upstream; vLLM's patches stay as they were."""
    _, _, root = world
    vllm_patch = (root / "patches" / "0001-vllm.patch").read_bytes()
    opened = load_json(cli(root, "patches", "edit", "--upstream", "flashinfer", "--json").stdout)
    assert opened["commits"] == 1 and opened["tag"] == "0.1"
    tree = Path(opened["work_tree"])
    assert (tree / "flashinfer/policy.py").is_file() and not (tree / "vllm").exists()
    busy = cli(root, "patches", "edit", "--upstream", "vllm")
    assert busy.returncode == 10 and "flashinfer patches is open" in busy.stderr
    (tree / "flashinfer/__init__.py").write_text("KNOB = 1\n")  # the release's __init__.py is empty
    git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "Add a knob\n\nWhy.\n\nGroup: fi")
    refreshed = load_json(cli(root, "patches", "refresh", "--close", "--json").stdout)
    assert refreshed.get("added") == ["0003-add-a-knob.patch"], refreshed
    assert "Upstream: flashinfer" in (root / "patches" / "0003-add-a-knob.patch").read_text()
    assert (root / "patches" / "0001-vllm.patch").read_bytes() == vllm_patch
    check = load_json(cli(root, "patches", "check", "--json").stdout)
    assert check["ok"] and [p["upstream"] for p in check["patches"]] == ["vllm", "flashinfer", "flashinfer"]


def test_the_runtime_base_must_lock_each_further_pin_at_its_version() -> None:
    from imgbuild.builder.bases import runtime_spec
    from imgbuild.errors import UpstreamError

    project = Project.load(Path(__file__).resolve().parents[2])  # the shipped project: vllm + flashinfer
    assert runtime_spec(project, None, Platform.parse("linux/amd64")).lock.pin("flashinfer-python") is not None
    fi = project.pin_named("flashinfer")
    moved = fi.model_copy(update={"source": fi.source.model_copy(update={"version": "0.7.5"})})
    project.pins = (project.pin, moved)
    with pytest.raises(
        UpstreamError, match=r"locks flashinfer-python 0\.7\.4, but patches/upstream\.yaml pins 0\.7\.5"
    ):
        runtime_spec(project, None, Platform.parse("linux/amd64"))


def test_a_stop_in_the_second_upstream_then_continue(world: tuple[Upstream, Upstream, Path]) -> None:
    from imgbuild.workflows.rebase import control as rebase
    from imgbuild.workflows.rebase.control import RebaseStopped
    from imgbuild.workflows.workspace import state_dir

    _, _, root = world
    with pytest.raises(RebaseStopped):
        rebase.start(root, "flashinfer=0.2", more=["vllm=v3"], date="2027-01-01")
    # flashinfer's rebase is written; vllm's stopped at its conflict
    assert Project.load(root).pin_named("flashinfer").tag == "0.2"
    assert "onto v3 is in progress, stopped at 0001-vllm.patch" in (rebase.in_progress_message(root) or "")
    tree = state_dir(root, "rebase") / "tree"
    marked = (tree / "vllm/a.py").read_text()
    resolved = marked.split("<<<<<<<")[0] + "a ten patched\n" + marked.split(">>>>>>> 0001-vllm.patch\n")[1]
    (tree / "vllm/a.py").write_text(resolved)
    done = rebase.resume(root, "continue")
    assert done.upstream == "vllm" and done.onto.tag == "v3" and done.earlier == []  # the earlier run's is done
    assert [p.tag for p in Project.load(root).pins] == ["v3", "0.2"]
    assert "+a ten patched" in (root / "patches" / "0001-vllm.patch").read_text()


def test_abort_of_the_second_upstream_keeps_the_first(world: tuple[Upstream, Upstream, Path]) -> None:
    from imgbuild.workflows.rebase import control as rebase
    from imgbuild.workflows.rebase.control import RebaseStopped

    _, _, root = world
    with pytest.raises(RebaseStopped):
        rebase.start(root, "flashinfer=0.2", more=["vllm=v3"], date="2027-01-01")
    message = rebase.abort(root).message
    assert "the rebase of flashinfer earlier in this run is written to patches/ and stays" in message
    assert [p.tag for p in Project.load(root).pins] == ["v1", "0.2"]
