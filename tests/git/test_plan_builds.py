"""From file plans to builds (pure): labels, digests, tags, shared layers, dry run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imgbuild.builder.runner import project_inputs
from imgbuild.deploy import history
from imgbuild.engine import check_binfmt
from imgbuild.errors import ConfigError, DockerError, ExitCode
from imgbuild.plan import labels
from imgbuild.plan.builds import BaseInfo, BuildPlan, make_build_plan
from imgbuild.plan.dockerfile import listing
from imgbuild.platforms import Platform
from imgbuild.project import Project
from tests.support.runner import imgbuild_here
from tests.support.synth import Upstream, make_project
from tests.support.synth_images import ENGRAM, SITE, SM121, engram_project, patches, release, variants

ARM = Platform.parse("linux/arm64")

BASE_ID = "sha256:" + "b" * 64


def bases(project: Project, image_id: str = BASE_ID) -> dict[tuple[str, Platform], BaseInfo]:
    return {(v, ARM): BaseInfo("base:1", image_id, image_id, ARM, SITE) for v in project.variants}


def build_plan(project: Project, wanted: list[str], image_id: str = BASE_ID) -> BuildPlan:
    return make_build_plan(project_inputs(project), project.plan(), bases(project, image_id), project.select(wanted))


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    release(upstream)
    return Project.load(engram_project(tmp_path / "p", upstream, "vllm-test"))


def test_layers_are_shared_and_latest_extends_engram_mem(project: Project) -> None:
    plan = build_plan(project, ["latest", "engram-mem"])
    ((_, lp),) = plan.layer_plans
    assert [tuple(f.path for f in node.files) for node in lp.nodes] == [SM121, ENGRAM]
    latest, mem = (next(i for i in plan.images if i.variant == v) for v in ("latest", "engram-mem"))
    assert latest.layers == (lp.nodes[0].name, lp.nodes[1].name) and mem.layers == (lp.nodes[0].name,)
    copies = [[ln for ln in i.dockerfile.splitlines() if ln.startswith("COPY")] for i in (latest, mem)]
    assert copies[0][:1] == copies[1] and len(copies[0]) == 2  # the same first COPY: one BuildKit snapshot
    shared = [e for e in listing(mem.context) if e.kind == "file" and e.name.startswith("layers/")]
    assert shared and set(shared) < set(listing(latest.context))  # the shared layer's files, byte for byte


def test_building_one_variant_plans_the_same_layer(project: Project) -> None:
    alone = build_plan(project, ["engram-mem"])
    both = build_plan(project, ["latest", "engram-mem"])
    assert alone.images[0].layers == next(i for i in both.images if i.variant == "engram-mem").layers
    assert alone.images[0].inputs_digest == next(i for i in both.images if i.variant == "engram-mem").inputs_digest


def test_tags_and_labels(project: Project) -> None:
    plan = build_plan(project, ["latest"])
    img = plan.images[0]
    assert img.immutable_ref == f"vllm-test:1.0.0-{img.inputs_digest[:12]}"
    assert img.moving_refs == ("vllm-test:latest",)
    assert labels.missing_required(img.labels) == []
    assert img.labels[labels.INPUTS] == img.inputs_digest
    assert img.labels["org.opencontainers.image.created"] == "2026-11-01T00:00:00Z"  # Last-Update, not the clock
    assert img.labels["org.opencontainers.image.base.digest"] == BASE_ID
    files = {f.path: f.state for f in labels.parse_files(img.labels["imgbuild.files"])}
    assert set(files.values()) == {"patched"}
    assert json.loads(img.labels["imgbuild.patches"]) == {
        "0001-attn": "applied",
        "0002-sparse": "applied",
        "0003-engram": "applied",
    }
    assert len(json.dumps(img.labels)) < 4000
    assert f'imgbuild.inputs="{img.inputs_digest}"' in img.dockerfile


def test_engram_mem_labels_say_reverted_and_original(project: Project) -> None:
    img = build_plan(project, ["engram-mem"]).images[0]
    states = {f.path: f.state for f in labels.parse_files(img.labels["imgbuild.files"])}
    assert states == {**dict.fromkeys(SM121, "patched"), **dict.fromkeys(ENGRAM, "original")}
    assert json.loads(img.labels["imgbuild.patches"])["0003-engram"] == "reverted"
    assert "DSV41_ENGRAM_DISK" not in img.dockerfile


def test_equal_inputs_equal_plans_and_base_change_changes_digests(project: Project) -> None:
    one, two = build_plan(project, ["latest"]), build_plan(project, ["latest"])
    assert one.images[0].dockerfile == two.images[0].dockerfile
    assert one.images[0].context == two.images[0].context
    other = build_plan(project, ["latest"], image_id="sha256:" + "c" * 64)
    assert other.images[0].inputs_digest != one.images[0].inputs_digest


def test_changing_only_engram_keeps_the_shared_layer(tmp_path: Path, upstream: Upstream) -> None:
    release(upstream)
    a = Project.load(engram_project(tmp_path / "a", upstream, "r"))
    b = Project.load(
        make_project(tmp_path / "b", upstream, "v1.0.0", patches(upstream, engram_marker="nvme"), variants("r"))
    )
    pa, pb = build_plan(a, ["latest"]), build_plan(b, ["latest"])
    assert pa.images[0].layers[0] == pb.images[0].layers[0]
    assert pa.images[0].layers[1] != pb.images[0].layers[1]


def test_an_unset_repository_is_one_config_error_in_build_bake_and_history(tmp_path: Path, upstream: Upstream) -> None:
    release(upstream)
    v = variants("r")
    v["latest"]["image"] = {"base": "b:1", "site_packages": SITE}  # type: ignore[index]
    root = make_project(tmp_path / "p", upstream, "v1.0.0", patches(upstream), v)
    project = Project.load(root)
    with pytest.raises(ConfigError, match=r"image\.repository is not set") as planned:
        build_plan(project, ["latest"])
    with pytest.raises(ConfigError) as read:  # history and rollback (exit 2 before issue 45)
        history.refs_of(project.variant("latest"), None)
    assert read.value.message == planned.value.message and read.value.exit_code == ExitCode.CONFIG
    assert "--repository NAME" in (read.value.hint or "")
    assert history.refs_of(project.variant("latest"), "elsewhere/x")[0] == "elsewhere/x"  # --repository is enough
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    for args in (["build", "--dry-run"], ["bake"]):
        out = imgbuild_here(root, *args, env=env)
        err = " ".join(out.stderr.split())
        said = planned.value.message.removeprefix("images/latest")  # latest's or engram-mem's, which inherits
        assert out.returncode == ExitCode.CONFIG and said in err, (args, err)
        assert ("--repository NAME" in err) == (args[0] == "build"), err  # named where the command has it


def test_an_unset_base_is_one_error_in_build_bake_and_lock(tmp_path: Path, upstream: Upstream) -> None:
    release(upstream)
    root = make_project(tmp_path / "p", upstream, "v1.0.0", patches(upstream), variants("r", base=None))
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    said = ".yaml: image.base is not set (nor inherited through from:)"  # latest's or engram-mem's, which inherits
    for args in (["build", "--dry-run"], ["bake"], ["lock"]):
        out = imgbuild_here(root, *args, env=env)
        err = " ".join(out.stderr.split())
        assert out.returncode == ExitCode.CONFIG and said in err, (args, err)
        assert ("--base REF" in err) == (args[0] == "build"), err  # the hint names --base where the command has it
    assert imgbuild_here(root, "build", "--dry-run", "--base", "b:1", env=env).returncode == 0


def test_reserved_label_is_refused(tmp_path: Path, upstream: Upstream) -> None:
    release(upstream)
    v = variants("r")
    v["latest"]["image"]["labels"] = {"imgbuild.files": "lies"}  # type: ignore[index]
    project = Project.load(make_project(tmp_path / "p", upstream, "v1.0.0", patches(upstream), v))
    with pytest.raises(ConfigError, match="reserved"):
        build_plan(project, ["latest"])


def test_source_date_prefers_the_newest_input() -> None:
    assert labels.source_date(["2026-11-01", "2025-01-01", "junk"], 0) == "2026-11-01T00:00:00Z"
    assert labels.source_date([], 1_700_000_000) == "2023-11-14T22:13:20Z"


def test_binfmt_missing_names_the_fix(tmp_path: Path) -> None:
    arm, amd = Platform.parse("linux/arm64"), Platform.parse("linux/amd64")
    check_binfmt(arm, arm, root=tmp_path)  # same arch: nothing to check
    with pytest.raises(DockerError, match="qemu-aarch64") as err:
        check_binfmt(arm, amd, root=tmp_path)
    assert "update-binfmts --enable qemu-aarch64" in (err.value.hint or "")
    (tmp_path / "qemu-aarch64").write_text("disabled\n")
    with pytest.raises(DockerError):
        check_binfmt(arm, amd, root=tmp_path)
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    check_binfmt(arm, amd, root=tmp_path)


def test_dry_run_prints_plan_layers_dockerfiles_and_context(project: Project, tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    proc = subprocess.run(
        [sys.executable, "-m", "imgbuild", "-C", str(project.root), "build", "--dry-run", "--base", "base:1"],
        capture_output=True,
        text=True,
        check=False,
        env={**__import__("os").environ, **env},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "layer 0 (on base; in engram-mem, latest)" in out
    assert "latest = base + layer 0 + layer 1" in out
    assert "COPY layers/" in out and " /usr/local/lib/python3.12/dist-packages/\n" in out
    assert "ENTRYPOINT []" in out and "CMD []" in out
    assert "vllm/attention.py" in out and "-0644 0:0" in out
    assert "unresolved" in out  # no daemon: says the digests are provisional


def test_local_builds_make_the_first_platform_unless_asked_for_all(tmp_path: Path) -> None:
    from imgbuild.project import Project
    from tests.support.synth import Upstream, make_project

    up = Upstream(tmp_path / "up")
    up.release("v1", {"vllm/a.py": "a\n"})
    variants = {"latest": {"name": "latest", "image": {"platforms": ["linux/arm64", "linux/amd64"]}}}
    project = Project.load(make_project(tmp_path / "p", up, "v1", [], variants=variants))

    def platforms(platform: str | None) -> list[tuple[str, ...]]:
        return [tuple(map(str, pfs)) for _, pfs in project.select(platform=platform).platforms]

    assert platforms(None) == [("linux/arm64",)]
    assert platforms("linux/amd64") == [("linux/amd64",)]
    assert platforms("all") == [("linux/arm64", "linux/amd64")]


def test_smoke_expectations_come_from_the_plan_and_agree_with_the_label(project: Project) -> None:
    from imgbuild.smoke.expected import expected_for

    for ib in build_plan(project, ["latest", "engram-mem"]).images:
        files = expected_for(ib).files
        assert files == tuple(labels.file_labels(ib.plan))
        assert files == tuple(labels.parse_files(ib.labels["imgbuild.files"]))  # what `smoke IMAGE` reads back
        assert {f.state for f in files} == ({"patched"} if ib.variant == "latest" else {"patched", "original"})


def test_only_docker_26_with_the_containerd_store_is_taken() -> None:
    from imgbuild.engine import CONTAINERD_SNAPSHOTTER, engine_problem

    store = [["driver-type", CONTAINERD_SNAPSHOTTER]]
    assert engine_problem("26.1.5+dfsg1", store) is None
    assert engine_problem("28.5.0", store) is None
    assert engine_problem("20.10.24+dfsg1", store) == "this engine has docker 20.10.24+dfsg1"
    assert engine_problem("26.1.5", [["Backing Filesystem", "extfs"]]) == "this engine has the classic image store"
    both = engine_problem("20.10.24", [])
    assert both == "this engine has docker 20.10.24 and the classic image store"
    assert engine_problem("", store) == "this engine has docker (unknown version)"
