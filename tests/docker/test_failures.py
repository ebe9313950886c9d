"""Bad input on the real engine: one clear error, a non-zero exit, and no half-tagged images."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from imgbuild.engine import Engine
from imgbuild.plan.dockerfile import context_tar
from imgbuild.platforms import Platform
from tests.docker.conftest import Built, MakeProject
from tests.support.jsonschema_check import load_json
from tests.support.multi_world import add_flashinfer, flashinfer_release
from tests.support.owners import containers_of
from tests.support.runner import Cli, ctrl_c
from tests.support.synth import Upstream
from tests.support.synth_images import FILES, SITE, engram_project

ARM64 = Platform.parse("linux/arm64")
pytestmark = pytest.mark.docker


def tags_of(engine: Engine, repo: str) -> set[str]:
    return {t for img in engine.client.images.list(name=repo) for t in img.tags if t.startswith(f"{repo}:")}


def derived(engine: Engine, parent: str, tag: str, lines: list[str], files: dict[str, bytes] | None = None) -> str:
    """An image built FROM `parent` with extra Dockerfile lines (and files in the context)."""
    text = "\n".join([f"FROM {parent}", *lines]) + "\n"
    engine.build(context_tar(text, files or {}), tags=[tag], platforms=[ARM64], epoch=0)
    return tag


def test_dead_daemon_says_how_to_start_it(make_project: MakeProject, cli: Cli, tmp_path: Path) -> None:
    proc = cli(make_project("dead"), "build", "--base", "skeleton", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert proc.returncode == 7
    assert "cannot reach the Docker daemon" in proc.stderr and "dockerd" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_base_with_failing_pull(make_project: MakeProject, cli: Cli, engine: Engine, prefix: str) -> None:
    proc = cli(make_project("nobase"), "build", "--base", f"{prefix}-absent/base:1")
    assert proc.returncode == 7
    assert "is not in the local image store, and pulling it for linux/arm64 failed" in proc.stderr
    assert "--base skeleton" in proc.stderr
    assert tags_of(engine, f"{prefix}-nobase") == set()


def test_base_drift_is_refused_naming_files_and_hashes(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str, skeleton_base: str
) -> None:
    drifted = FILES["vllm/sparse.py"].replace("return 9\n", "return 9  # vendor hotfix\n").encode()
    base = derived(
        engine, skeleton_base, f"{prefix}-drift/base:1", [f"COPY vllm/ {SITE}/vllm/"], {"vllm/sparse.py": drifted}
    )
    proc = cli(make_project("drift"), "build", "--base", base)
    assert proc.returncode == 6, proc.stderr
    assert "base drift" in proc.stderr and f"{SITE}/vllm/sparse.py" in proc.stderr
    assert hashlib.sha256(drifted).hexdigest() in proc.stderr
    assert hashlib.sha256(FILES["vllm/sparse.py"].encode()).hexdigest() in proc.stderr
    assert tags_of(engine, f"{prefix}-drift") == set()


def test_vllm_under_another_pythons_dist_packages_is_found_and_named(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str, skeleton_base: str
) -> None:
    """The base's vLLM tree sits under python3.11 while the variant says python3.12: the error says where it is,
    that those are the pinned files, and what to set (issue 37, item 4)."""
    other = "/usr/local/lib/python3.11/dist-packages"
    moved = [f"RUN mkdir -p {other} && mv {SITE}/vllm {other}/"]
    base = derived(engine, skeleton_base, f"{prefix}-py311/base:1", moved)
    proc = cli(make_project("py311"), "build", "--base", base)
    assert proc.returncode == 6, proc.stderr
    err = " ".join(proc.stderr.split())  # rich wraps lines
    assert f"has no vllm/ in {SITE} (the site-packages image.site_packages in images/latest.yaml)" in err, err
    assert f"it has vllm/ in {other} (the pinned files)" in err, err
    assert f"set `site_packages: {other}` under `image:` in images/latest.yaml" in err, err
    assert "`site_packages: null`" in err
    assert tags_of(engine, f"{prefix}-py311") == set()


def test_a_base_without_flashinfer_says_the_package_is_missing_and_what_the_stack_needs(
    tmp_path: Path, cli: Cli, engine: Engine, prefix: str, synth_upstream: Upstream, skeleton_base: str
) -> None:
    """A project pinning and patching FlashInfer, on a base with vLLM only (the vLLM-only skeleton): not "drift"
    of one file but no flashinfer package at all, the pin and the patch, and the choices (issue 37, item 4)."""
    fi = Upstream(tmp_path / "fi-upstream")
    flashinfer_release(fi)
    repo = f"{prefix}-nofi"
    root = engram_project(tmp_path / "project", synth_upstream, repo)
    patch = add_flashinfer(root, fi)
    proc = cli(root, "build", "--base", skeleton_base)
    assert proc.returncode == 6, proc.stderr
    err = " ".join(proc.stderr.split())
    assert f"base {skeleton_base} has no flashinfer package at all" in err, err
    assert "the stack pins it (the pin flashinfer 0.1 in patches/upstream.yaml)" in err, err
    assert f"patches it ({patch.removesuffix('.patch')})" in err, err
    assert "use a base with flashinfer==0.1 installed" in err and "reverting a patch in a variant is not enough" in err
    assert "vllm/" not in err.split("the files it checked:")[0]  # vLLM's files are there: nothing said of them
    assert tags_of(engine, repo) == set()


def test_smoke_of_an_image_that_exists_nowhere_names_the_variants_and_how_to_get_it(
    make_project: MakeProject, cli: Cli, prefix: str, tmp_path: Path
) -> None:
    """Not a variant, not a local image: the variants, which variant builds that name, a typo's variant, a pull
    (issue 37, item 4)."""
    project = make_project("nowhere")
    repo = f"{prefix}-nowhere"
    proc = cli(project, "smoke", f"{repo}:engram-mem")
    assert proc.returncode == 7, proc.stderr
    err = " ".join(proc.stderr.split())
    assert "is neither a variant of this project (engram-mem, latest) nor an image in the local store" in err, err
    assert "`imgbuild build engram-mem` makes it (images/engram-mem.yaml)" in err, err
    assert f"`docker pull {repo}:engram-mem`" in err, err
    typo = " ".join(cli(project, "smoke", "lates").stderr.split())
    assert "did you mean the variant 'latest'? `imgbuild smoke latest`" in typo, typo
    empty = tmp_path / "not-a-project"
    empty.mkdir()
    alone = cli(empty, "smoke", "nothing-here:1")
    assert alone.returncode == 7, alone.stderr
    said = " ".join(alone.stderr.split())
    assert "there is no project here" in said and "`docker pull nothing-here:1`" in said, said
    assert "imgbuild -C PROJECT smoke VARIANT" in said and "Traceback" not in said


def test_tag_collision_with_a_foreign_image(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str, skeleton_base: str
) -> None:
    repo = f"{prefix}-clash"
    engine.tag(engine.require(skeleton_base).id, f"{repo}:engram-mem")
    proc = cli(make_project("clash"), "build", "--base", "skeleton")
    assert proc.returncode == 7
    assert "tag collision" in proc.stderr and f"{repo}:engram-mem" in proc.stderr
    assert tags_of(engine, repo) == {f"{repo}:engram-mem"}  # nothing else was tagged, not even a layer


def test_failing_smoke_never_moves_the_moving_tag(
    make_project: MakeProject, cli: Cli, engine: Engine, prefix: str
) -> None:
    wrong = "python3 -c 'import vllm.attention as a; assert a.attn_3() == 4'"
    project = make_project("badsmoke", skeleton_commands=[wrong])
    repo = f"{prefix}-badsmoke"
    proc = cli(project, "build", "latest", "--base", "skeleton", "--json")
    assert proc.returncode == 8, proc.stderr
    assert "failed its smoke test" in proc.stderr and f"{repo}:latest left unchanged" in proc.stderr
    assert not any(t.endswith(":latest") or ":1.0.0-" in t for t in tags_of(engine, repo))
    error = load_json(proc.stdout)["error"]  # the error document carries every check of the failing image
    report = error["smoke"]
    assert [(c["group"], c["name"]) for c in report["checks"] if c["status"] == "fail"] == [("command", wrong)]
    assert report["files"] and all(f["ok"] for f in report["files"])
    # the image is gone with its tag; the hint's two commands keep it and give the same report
    same = ("latest", "--base", "skeleton", "--platform", "linux/arm64")
    assert f"`imgbuild build {' '.join(same)} --no-smoke`" in error["hint"], error["hint"]
    assert f"`imgbuild smoke {' '.join(same)}`" in error["hint"], error["hint"]
    kept = cli(project, "build", *same, "--no-smoke")
    assert kept.returncode == 0, kept.stderr
    again = cli(project, "smoke", *same, "--json")
    assert again.returncode == 8, again.stdout + again.stderr
    (found,) = load_json(again.stdout)["reports"]
    assert found["image_id"] == report["image_id"]  # the same image: equal inputs, equal digests
    assert [c["name"] for c in found["checks"] if c["status"] == "fail"] == [wrong]


def test_interrupted_build_leaves_no_half_tagged_image(
    make_project: MakeProject, engine: Engine, prefix: str, synth_upstream: Upstream
) -> None:
    project = make_project("interrupt")
    repo = f"{prefix}-interrupt"
    # inside the smoke run, after the immutable tag was set
    done = ctrl_c(project, "build", "latest", "--base", "skeleton", when="smoke-testing", after=0.5)
    assert done.returncode == 130, done.stderr
    assert "interrupted; nothing was changed" in done.stderr and "Traceback" not in done.stderr  # not a bare 130
    assert not any(t.endswith(":latest") or ":1.0.0-" in t for t in tags_of(engine, repo))
    label = f"imgbuild.upstream.url={synth_upstream.url}"
    assert engine.client.containers.list(all=True, filters={"label": label}) == []  # the smoke container is gone
    assert containers_of(engine, done.pid) == []


def test_smoke_fails_on_broken_images(built: Built, engine: Engine) -> None:
    latest = f"{built.repo}:latest"
    broken = derived(
        engine,
        latest,
        f"{built.repo}:broken-syntax",
        [f"COPY vllm/ {SITE}/vllm/"],
        {"vllm/attention.py": b"def attn_3(:\n"},
    )
    proc = built.cli("smoke", broken, "--json")
    assert proc.returncode == 8
    failed = {
        (c["group"], c["name"]) for r in load_json(proc.stdout)["reports"] for c in r["checks"] if c["status"] == "fail"
    }
    assert {("files", "vllm/attention.py"), ("runtime", "compile vllm/attention.py")} <= failed
    assert {g for g, _ in failed} == {"config", "files", "runtime", "command"}  # the command imports the file too
    assert ("config", "layers") in failed  # the COPY after the build is a layer of its own
    static = built.cli("smoke", broken, "--static", "--json")  # the same file and layer, without running it
    assert static.returncode == 8
    (report,) = load_json(static.stdout)["reports"]
    fails = {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}
    assert set(fails) == {"vllm/attention.py", "layers"}, fails
    assert fails["vllm/attention.py"].startswith("expected patched "), fails
    assert [(f["path"], f["expected"], f["actual"]) for f in report["files"] if not f["ok"]] == [
        ("vllm/attention.py", "patched", "other")
    ]

    entry = derived(engine, latest, f"{built.repo}:broken-entrypoint", ['ENTRYPOINT ["vllm", "serve"]'])
    proc = built.cli("smoke", entry, "--json")
    assert proc.returncode == 8
    failed = {c["name"] for r in load_json(proc.stdout)["reports"] for c in r["checks"] if c["status"] == "fail"}
    assert {"entrypoint", "run-directly"} <= failed
