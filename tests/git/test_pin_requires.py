"""Pins that depend on each other, with real git and real wheels (made here, with METADATA): vllm 2.0.0 requires
flashinfer-python==0.2.0, the flashinfer pin is 0.1.0. `patches check` and `plan` name it; `patches bump` moves
the flashinfer pin with vllm (and carries its patch), stops before changing anything when the index lacks the
required version, or takes an `override:` written in patches/upstream.yaml. The index's versions come from a
stand-in for `pip index versions` (the only network step); everything else is real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from imgbuild.cache import cache_dir
from imgbuild.shapes import dump
from imgbuild.upstream.git import blob_id
from imgbuild.upstream.mirror import Mirror
from imgbuild.workflows import bump as bumpmod
from tests.git.test_wheel_source import make_wheel
from tests.support.jsonschema_check import load_json
from tests.support.runner import imgbuild_captured as cli
from tests.support.synth import git, header

V_OLD, V_NEW = b"def f():\n    return 1\n", b"def f():\n    return 2\n"
F_OLD, F_NEW = b"PAGE = 32\n", b"PAGE = 64\n"
REQUIRES = {"1.0.0": "0.1.0", "2.0.0": "0.2.0", "3.0.0": "0.2.0"}  # vllm -> the flashinfer-python it requires
OVERRIDE = (
    "  override:\n    requirement: flashinfer-python==0.2.0\n    version: 0.3.0\n    reason: no 0.2.0 on the index\n"
)


def vllm_wheel(dest: Path, version: str) -> Path:
    wheel = dest / f"vllm-{version}-cp38-abi3-manylinux_2_28_aarch64.whl"
    meta = f"Metadata-Version: 2.4\nName: vllm\nVersion: {version}\nRequires-Dist: torch==2.14.0\n"
    meta += f"Requires-Dist: flashinfer-python=={REQUIRES[version]}\n"
    make_wheel(
        wheel, {"vllm/__init__.py": b"", "vllm/m.py": V_OLD, f"vllm-{version}.dist-info/METADATA": meta.encode()}
    )
    return wheel


def fi_wheel(dest: Path, version: str) -> Path:
    wheel = dest / f"flashinfer_python-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.4\nName: flashinfer-python\nVersion: {version}\nRequires-Dist: torch\n"
    files = {"flashinfer/__init__.py": b"", "flashinfer/policy.py": F_OLD}
    make_wheel(wheel, {**files, f"flashinfer_python-{version}.dist-info/METADATA": meta.encode()})
    return wheel


def diff(path: str, old: bytes, new: bytes) -> str:
    return (
        f"diff --git a/{path} b/{path}\nindex {blob_id(old)}..{blob_id(new)} 100644\n--- a/{path}\n+++ b/{path}\n"
        + "".join(f"@@ -{1},{n} +{1},{n} @@\n" for n in [len(old.splitlines())])
        + "".join(f"-{line}\n" for line in old.decode().splitlines())
        + "".join(f"+{line}\n" for line in new.decode().splitlines())
    )


def pin_yaml(name: str, project: str, version: str, wheel: Path, platform: str) -> dict[str, object]:
    source = {"kind": "wheel", "project": project, "version": version, "platform": platform,
              "python_version": "3.12", "filename": wheel.name}  # fmt: skip
    from imgbuild.digests import sha256_file

    source["sha256"] = sha256_file(wheel)
    from imgbuild.config.models import UpstreamPin

    pin = UpstreamPin.model_validate({"name": name, "package_root": name, "tag": f"v{version}", "commit": "0" * 40,
                                      "source": source})  # fmt: skip
    commit = Mirror(pin.source, name).resolve(pin.tag).commit
    return {"name": name, "package_root": name, "tag": f"v{version}", "commit": commit, "source": source}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """vllm 1.0.0 (requires flashinfer-python==0.1.0) and flashinfer 0.1.0 pinned, one patch each; the cache
    holds vllm 1.0.0 and 2.0.0 and flashinfer-python 0.1.0 and 0.3.0 (no 0.2.0), a git checkout on main."""
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True)
    v1, f1 = vllm_wheel(wheels, "1.0.0"), fi_wheel(wheels, "0.1.0")
    vllm_wheel(wheels, "2.0.0"), vllm_wheel(wheels, "3.0.0"), fi_wheel(wheels, "0.3.0")
    root = tmp_path / "p"
    (root / "patches").mkdir(parents=True)
    (root / "images").mkdir()
    top = pin_yaml("vllm", "vllm", "1.0.0", v1, "manylinux_2_28_aarch64")
    fi = pin_yaml("flashinfer", "flashinfer-python", "0.1.0", f1, "any")
    (root / "patches" / "upstream.yaml").write_text(yaml.safe_dump({**top, "also": [fi]}, sort_keys=False))
    (root / "patches" / "0001-m.patch").write_text(header("return 2", "x") + diff("vllm/m.py", V_OLD, V_NEW))
    fi_header = header("64-token pages", "x").replace("Group: x\n", "Upstream: flashinfer\nGroup: x\n")
    (root / "patches" / "0002-fi.patch").write_text(fi_header + diff("flashinfer/policy.py", F_OLD, F_NEW))
    (root / "patches" / "series").write_text("0001-m.patch\n0002-fi.patch\n")
    (root / "images" / "latest.yaml").write_text("name: latest\nimage:\n  base: vllm/vllm-openai:v1\n")
    (root / ".gitignore").write_text("/.imgbuild-work/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the project")
    return root


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The package index's versions of flashinfer-python (what `pip index versions` would list)."""
    versions = ["0.3.0", "0.1.0"]
    monkeypatch.setattr(bumpmod, "index_versions", lambda _source: list(versions))
    return versions


def run(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, dict[str, object], str]:
    code, out, err = cli(capsys, "-C", str(root), *args, "--json")
    return code, load_json(out) if out.strip() else {}, err


def add_override(root: Path) -> None:
    path = root / "patches" / "upstream.yaml"
    path.write_text(path.read_text() + OVERRIDE)
    git(root, "commit", "-q", "-am", "override")


def test_check_and_plan_name_each_pins_requirement(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, doc, err = run(capsys, project, "patches", "check")
    assert code == 0, err
    [need] = doc["requirements"]  # type: ignore[misc]
    assert need["status"] == "ok" and need["message"] == (
        "vLLM 1.0.0 requires flashinfer-python==0.1.0; the flashinfer pin is 0.1.0"
    )
    code, doc, err = run(capsys, project, "patches", "check", "--onto", "2.0.0")
    assert code == 0, err
    [need] = doc["requirements"]["2.0.0"]  # type: ignore[index]
    assert need["message"] == "vLLM 2.0.0 requires flashinfer-python==0.2.0; the flashinfer pin is 0.1.0"
    code, doc, err = run(capsys, project, "plan")
    assert code == 0, err and doc["overrides"] == [] and doc["pin_problems"] == []


@pytest.mark.usefixtures("index")
def test_bump_stops_before_changing_anything_when_the_index_lacks_the_requirement(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    before = (project / "patches" / "upstream.yaml").read_text()
    code, doc, err = run(capsys, project, "patches", "bump", "--onto", "2.0.0", "--no-build")
    assert code == 6, err
    error = doc["error"]
    assert "vLLM 2.0.0 requires flashinfer-python==0.2.0; the flashinfer pin is 0.1.0" in error["message"]
    assert "it has: 0.3.0, 0.1.0" in error["message"] and "nothing was changed" in error["message"]
    assert "wait" in error["hint"] and 'requirement: "flashinfer-python==0.2.0"' in error["hint"]
    assert error["index_versions"] == ["0.3.0", "0.1.0"]
    assert git(project, "status", "--porcelain") == "" and git(project, "branch", "--list").split() == ["*", "main"]
    assert (project / "patches" / "upstream.yaml").read_text() == before
    assert not (project / ".imgbuild-work" / "rebase").exists()


def test_bump_moves_the_required_pin_with_it_and_carries_its_patch(
    capsys: pytest.CaptureFixture[str], project: Path, index: list[str], tmp_path: Path
) -> None:
    fi_wheel(cache_dir() / "wheels", "0.2.0")
    index.insert(0, "0.2.0")
    code, doc, err = run(capsys, project, "patches", "bump", "--onto", "2.0.0", "--no-build",
                         "--report-dir", str(tmp_path / "r"))  # fmt: skip
    assert code == 0, err
    [moved] = doc["pins"]  # type: ignore[misc]
    assert (moved["pin"], moved["old"], moved["new"]) == ("flashinfer", "v0.1.0", "v0.2.0")
    assert "flashinfer v0.1.0 → v0.2.0 (1 carried)" in str(doc["message"])
    pins = yaml.safe_load(git(project, "show", "HEAD:patches/upstream.yaml"))
    assert pins["tag"] == "v2.0.0" and pins["also"][0]["tag"] == "v0.2.0" and "override" not in pins["also"][0]
    md = (tmp_path / "r" / "bump-v2.0.0.md").read_text()
    assert "## Pins moved with it" in md and "The flashinfer patches: v0.1.0 → v0.2.0" in md and "0002-fi.patch" in md
    assert git(project, "status", "--porcelain") == ""
    code, doc, err = run(capsys, project, "patches", "check")
    assert code == 0, err


def test_bump_takes_the_override_and_it_is_shown_and_recorded(
    capsys: pytest.CaptureFixture[str], project: Path, index: list[str], tmp_path: Path
) -> None:
    add_override(project)
    code, doc, err = run(capsys, project, "patches", "check")  # on 1.0.0 the override replaces nothing yet
    assert code == 1 and "replaces nothing" in doc["pin_problems"][0]  # type: ignore[index]
    code, doc, err = run(capsys, project, "patches", "bump", "--onto", "2.0.0", "--no-build",
                         "--report-dir", str(tmp_path / "r"))  # fmt: skip
    assert code == 0, err
    [moved] = doc["pins"]  # type: ignore[misc]
    assert moved["new"] == "v0.3.0" and moved["override"]["reason"] == "no 0.2.0 on the index"
    md = (tmp_path / "r" / "bump-v2.0.0.md").read_text()
    assert "override in patches/upstream.yaml: flashinfer-python==0.2.0 → 0.3.0: no 0.2.0 on the index" in md
    # the stock base installs what its vLLM requires: the report says a build on it stops at the package check
    assert "vllm/vllm-openai:v1 carries flashinfer-python==0.2.0 (what its vLLM requires), not 0.3.0" in md
    code, doc, err = run(capsys, project, "patches", "check")
    assert code == 0, err
    [need] = doc["requirements"]  # type: ignore[misc]
    assert need["status"] == "overridden"
    code, doc, err = run(capsys, project, "plan")
    assert code == 0, err
    assert doc["overrides"] == [{"pin": "flashinfer", "requirement": "flashinfer-python==0.2.0", "version": "0.3.0",
                                 "reason": "no 0.2.0 on the index"}]  # fmt: skip
    code, out, err = cli(capsys, "-C", str(project), "plan")
    # the requirement's line names the override and its reason, once (issue 44: it was printed twice)
    assert "overridden: the flashinfer pin is 0.3.0 (patches/upstream.yaml: no 0.2.0 on the index)" in out, out
    assert " ".join(out.split()).count("no 0.2.0 on the index") == 1, out
    # recorded in every image's labels
    from imgbuild.plan.inputs import project_inputs
    from imgbuild.plan.labels import OVERRIDES, image_labels
    from imgbuild.project import Project

    loaded = Project.load(project)
    plan = loaded.plan(["latest"])[0]
    labels = image_labels(plan, project_inputs(loaded), base_ref="vllm/vllm-openai:v1", base_digest=None,
                          site_packages="/sp", layers=[], title="t", source=None)  # fmt: skip
    assert json.loads(labels[OVERRIDES]) == [{"pin": "flashinfer", "requirement": "flashinfer-python==0.2.0",
                                              "version": "0.3.0", "reason": "no 0.2.0 on the index"}]  # fmt: skip
    # the next bump that finds what was required (vllm 3.0.0 still requires 0.2.0) moves to it and drops the override
    fi_wheel(cache_dir() / "wheels", "0.2.0")
    index.insert(0, "0.2.0")
    code, doc, err = run(capsys, project, "patches", "bump", "--onto", "3.0.0", "--no-build")
    assert code == 0, err
    [moved] = doc["pins"]  # type: ignore[misc]
    assert (moved["old"], moved["new"], moved["override_dropped"]) == ("v0.3.0", "v0.2.0", True)
    pins = yaml.safe_load(git(project, "show", "HEAD:patches/upstream.yaml"))
    assert pins["also"][0]["tag"] == "v0.2.0" and "override" not in pins["also"][0]
    code, doc, err = run(capsys, project, "patches", "check")
    assert code == 0, err


def test_a_pin_moved_alone_disagrees_and_the_runtime_lock_is_refused(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    code, _, err = run(capsys, project, "patches", "rebase", "--onto", "flashinfer=0.3.0")
    assert code == 0, err
    code, doc, err = run(capsys, project, "patches", "check")
    assert code == 1 and doc["pin_problems"] == [  # every patch applies; the pins do not agree
        "vLLM 1.0.0 requires flashinfer-python==0.1.0; the flashinfer pin is 0.3.0"
    ]
    assert all(p["method"] == "exact" for p in doc["patches"])  # type: ignore[attr-defined]
    code, out, err = cli(capsys, "-C", str(project), "patches", "check")
    assert code == 1 and "the pins disagree" in out and "the flashinfer pin is 0.3.0" in err
    code, _, err = cli(capsys, "-C", str(project), "skeleton", "--runtime", "--relock", "--platform", "linux/arm64")
    assert code == 6 and "the pins disagree, so the runtime lock cannot hold them all" in err


def test_images_lock_holds_every_pin() -> None:
    from imgbuild.platforms import Platform
    from imgbuild.registry import lock as lockmod

    base = lockmod.LockedBase(
        "b:1", "sha256:" + "1" * 64, "m", ((Platform.parse("linux/arm64"), "sha256:" + "2" * 64),)
    )
    more = [("flashinfer", "v0.1.0", "c" * 40)]
    made = lockmod.make_lock([], "v1", "a" * 40, "s", lambda _ref: base, more=more)
    assert dump(made.file())["upstream"] == {"tag": "v1", "commit": "a" * 40, "also": [
        {"name": "flashinfer", "tag": "v0.1.0", "commit": "c" * 40}]}  # fmt: skip
    moved = [("flashinfer", "v0.3.0", "d" * 40)]
    assert lockmod.check(made, [], "v1", "a" * 40, "s", None, more) == []
    assert lockmod.check(made, [], "v1", "a" * 40, "s", None, moved) == [
        f"upstream flashinfer: locked v0.1.0 {'c' * 12}, pinned v0.3.0 {'d' * 12}"
    ]
    assert lockmod.check(made, [], "v1", "a" * 40, "s", None, []) == [
        "upstream flashinfer: locked v0.1.0, no longer pinned"
    ]


def test_lock_check_names_a_runtime_lock_that_lacks_a_pin(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    """`lock --check` covers every pin in the runtime locks too (what `build --base runtime` would refuse)."""
    locks = project / "images" / "runtime-lock"
    locks.mkdir()
    sha = "a" * 64
    text = f"vllm==1.0.0 --hash=sha256:{sha}\nflashinfer-python==0.1.0 --hash=sha256:{sha}\n"
    (locks / "linux-arm64.txt").write_text(text)
    from imgbuild.cli.lock import runtime_locks
    from imgbuild.project import Project

    assert runtime_locks(Project.load(project)) == []
    (locks / "linux-arm64.txt").write_text(text.replace("0.1.0", "0.0.9"))
    assert runtime_locks(Project.load(project)) == [
        "images/runtime-lock/linux-arm64.txt locks flashinfer-python 0.0.9, but patches/upstream.yaml pins 0.1.0"
    ]
    code, _, err = cli(capsys, "-C", str(project), "lock", "--check", "--offline")
    assert code == 1 and "locks flashinfer-python 0.0.9" in err
