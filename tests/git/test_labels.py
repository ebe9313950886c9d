"""OCI metadata (pure): source/revision of this project, qualified base name, no placeholder digests, the SBOM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from imgbuild.plan import labels
from imgbuild.plan.builds import BaseInfo, make_build_plan
from imgbuild.plan.inputs import project_inputs, project_source
from imgbuild.platforms import Platform
from imgbuild.project import Project
from tests.support.synth import Upstream
from tests.support.synth_images import SITE, engram_project, release

ARM = Platform.parse("linux/arm64")

OCI = labels.OCI


@pytest.mark.parametrize(
    ("remote", "url"),
    [
        ("git@github.com:acme/imgbuild.git", "https://github.com/acme/imgbuild"),
        ("https://user:token@github.com/acme/imgbuild.git", "https://github.com/acme/imgbuild"),
        ("ssh://git@git.example.org:2222/acme/imgbuild.git", "https://git.example.org/acme/imgbuild"),
        ("https://git.example.org/acme/imgbuild/", "https://git.example.org/acme/imgbuild"),
        ("/srv/git/imgbuild.git", None),
        ("file:///srv/git/imgbuild.git", None),
    ],
)
def test_source_url_from_a_git_remote(remote: str, url: str | None) -> None:
    assert labels.source_url(remote) == url


def test_base_name_is_fully_qualified() -> None:
    assert labels.qualified("vllm/vllm-openai:v0.33.0") == "docker.io/vllm/vllm-openai:v0.33.0"
    assert labels.qualified("imgbuild-skeleton:arm64-1") == "docker.io/library/imgbuild-skeleton:arm64-1"
    assert labels.qualified("127.0.0.1:5000/a/b:1") == "127.0.0.1:5000/a/b:1"


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    release(upstream)
    return Project.load(engram_project(tmp_path / "p", upstream, "vllm-test"))


def test_labels_name_this_project_and_leave_unknowns_out(project: Project) -> None:
    assert project_source(project.root) == labels.Source()  # not a git checkout: nothing to claim
    subprocess.run(["git", "init", "-q", str(project.root)], check=True)
    subprocess.run(["git", "-C", str(project.root), "add", "-A"], check=True)
    env = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", *env, "-C", str(project.root), "commit", "-qm", "x"], check=True)
    remote = "git@github.com:acme/dsv41.git"
    subprocess.run(["git", "-C", str(project.root), "remote", "add", "origin", remote], check=True)
    head = subprocess.run(
        ["git", "-C", str(project.root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    inputs = project_inputs(project)
    assert inputs.source == labels.Source("https://github.com/acme/dsv41", head)
    bases = {(v, ARM): BaseInfo("base:1", "sha256:" + "b" * 64, None, ARM, SITE) for v in project.variants}
    plan = make_build_plan(inputs, project.plan(), bases, project.select(["latest"]))
    lab = plan.images[0].labels
    assert lab[f"{OCI}source"] == "https://github.com/acme/dsv41" and lab[f"{OCI}revision"] == head
    assert lab[f"{OCI}base.name"] == "docker.io/library/base:1"
    assert f"{OCI}base.digest" not in lab  # a local base has no registry digest: absent, not "unresolved"
    assert lab[f"{OCI}title"] == "vllm-test:latest" and lab[f"{OCI}licenses"] == "Apache-2.0"
    assert lab[f"{OCI}version"] == "1.0.0"
    assert lab["imgbuild.upstream.commit"] == project.pin.commit  # the vLLM release stays in imgbuild's keys
    assert labels.missing_required(lab) == []


def test_sbom_names_the_files_the_release_and_the_base_by_digest(project: Project) -> None:
    from imgbuild.publish import sbom

    inputs = project_inputs(project)
    bases = {(v, ARM): BaseInfo("vllm/vllm-openai:v1", "sha256:" + "1" * 64, "sha256:" + "a" * 64,
                                          ARM, SITE) for v in project.variants}  # fmt: skip
    ib = make_build_plan(inputs, project.plan(), bases, project.select(["engram-mem"])).images[0]
    facts = ("127.0.0.1:5000/t/vllm", "linux/arm64", "sha256:" + "e" * 64, ib.labels)
    doc = sbom.spdx(*facts)
    assert sbom.render(doc) == sbom.render(sbom.spdx(*facts))  # equal inputs, equal bytes
    files = labels.parse_files(ib.labels["imgbuild.files"])
    assert {f["fileName"] for f in doc["files"]} == {f"{SITE}/{f.path}" for f in files}  # type: ignore[attr-defined]
    assert doc["name"] == "vllm-test:engram-mem linux/arm64"
    assert sbom.check(doc, ib.labels) == []
    names = {p["name"]: p for p in doc["packages"]}  # type: ignore[attr-defined]
    assert (
        names["vllm"]["versionInfo"] == "1.0.0"
        and names["docker.io/vllm/vllm-openai:v1"]["versionInfo"] == "sha256:" + "a" * 64
    )
    wrong = json.loads(sbom.render(doc))
    wrong["files"][0]["checksums"][0]["checksumValue"] = "0" * 64
    problems = sbom.check(wrong, {**ib.labels, f"{OCI}base.digest": "sha256:" + "b" * 64})
    assert len(problems) == 2 and "the base is not named by" in problems[1]
    for written in ("docker.io/vllm/vllm-openai:v1", "docker.io/vllm/vllm-openai@sha256:" + "a" * 64):
        pinned = sbom.spdx(*facts[:3], {**ib.labels, f"{OCI}base.name": written})
        (base,) = [p for p in pinned["packages"] if p["SPDXID"] == "SPDXRef-Package-base"]  # type: ignore[attr-defined]
        purl = base["externalRefs"][0]["referenceLocator"]
        assert purl == f"pkg:oci/vllm-openai@sha256%3A{'a' * 64}?repository_url=docker.io/vllm/vllm-openai", purl


def test_a_base_built_here_has_no_registry_identity_in_labels_or_sbom(project: Project) -> None:
    from imgbuild.publish import sbom

    skeleton = "imgbuild-skeleton:arm64-1"  # a stand-in: its local id is no registry digest, its name no registry's
    bases = {(v, ARM): BaseInfo(skeleton, "sha256:" + "1" * 64, None, ARM, SITE, local=True) for v in project.variants}
    ib = make_build_plan(project_inputs(project), project.plan(), bases, project.select(["engram-mem"])).images[0]
    assert f"{OCI}base.name" not in ib.labels and f"{OCI}base.digest" not in ib.labels
    assert ib.labels[labels.BASE_LOCAL] == skeleton and labels.missing_required(ib.labels) == []
    assert f"FROM {skeleton}" in ib.dockerfile  # built on it all the same
    doc = sbom.spdx("127.0.0.1:5000/t/vllm", "linux/arm64", "sha256:" + "e" * 64, ib.labels)
    (base,) = [p for p in doc["packages"] if p["SPDXID"] == "SPDXRef-Package-base"]  # type: ignore[attr-defined]
    assert base["name"] == base["versionInfo"] == "NOASSERTION" and base["externalRefs"] == []
    assert "skeleton" not in sbom.render(doc).decode()
    assert sbom.check(doc, ib.labels) == []


def test_an_edit_of_a_patch_a_variant_leaves_out_makes_no_new_image_of_it(project: Project) -> None:
    """Its `created` and `imgbuild.series` cover only the patches it applies (issue 44: a rebuild of engram-mem
    after an edit of a patch it reverts made a new image with identical layers)."""
    bases = {(v, ARM): BaseInfo("base:1", "sha256:" + "1" * 64, None, ARM, SITE) for v in project.variants}

    def plan(p: Project) -> dict[str, tuple[str, str, str]]:
        images = make_build_plan(project_inputs(p), p.plan(), bases, p.select(["latest", "engram-mem"])).images
        return {
            ib.variant: (ib.inputs_digest, ib.labels[f"{OCI}created"], ib.labels["imgbuild.series"]) for ib in images
        }

    before = plan(project)
    assert before["latest"][2] == project.series_digest  # every patch: the project's series digest
    left_out = [n for n in project.variant("latest").selected if n not in project.variant("engram-mem").selected]
    assert left_out, "engram-mem leaves out none of latest's patches"
    patch = next(p for p in project.patches if p.name == left_out[0])
    path = project.patches_dir / patch.filename
    text = path.read_text()
    path.write_text(text.replace("Last-Update: ", "Last-Update: 2099-01-01\nX-Old-Update: ", 1) + "\n")
    after = plan(Project.load(project.root))
    assert after["engram-mem"] == before["engram-mem"]  # the same image: nothing it applies changed
    assert after["latest"][0] != before["latest"][0] and after["latest"][1] == "2099-01-01T00:00:00Z"
