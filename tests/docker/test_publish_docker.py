"""Publishing into a real registry (Debian's docker-registry on loopback) with the real engine.

`imgbuild publish` builds on the skeleton stand-in (`--base skeleton`),
pushes each platform with `docker push` and joins them with `docker buildx
imagetools create`. The tests read the result back with `imagetools inspect`
and the registry's access log, both tools other than the code under test.
One registry serves the module; each test publishes into its own repository.
The module's project locks a base pushed into that registry (two platforms),
for the lock and bake tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from imgbuild.platforms import Platform
from imgbuild.registry import tools
from imgbuild.registry.lock import load_lock
from tests.support import needs
from tests.support.jsonschema_check import load_json
from tests.support.registry_env import (
    REPO_ROOT,
    RegistryProcess,
    docker,
    free_port,
    push_skeleton_bases,
    remove_images,
    set_platforms,
    uploads,
)
from tests.support.runner import imgbuild
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release

pytestmark = pytest.mark.docker
PLATFORMS = ["linux/amd64", "linux/arm64"]


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild"


@dataclass
class World:
    registry: RegistryProcess
    project: Path  # a synthetic project whose base is in `registry`, locked; both platforms declared
    base: str
    repo: str  # the local repository the builds tag (under the session's prefix, so the session removes them)
    cache: Path

    def publish(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return imgbuild(
            self.project, "publish", *args, "--base", "skeleton", env={"IMGBUILD_CACHE": str(self.cache), **(env or {})}
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Iterator[World]:
    root = tmp_path_factory.mktemp("publish")
    registry = RegistryProcess.start(root / "registry")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("IMGBUILD_CACHE", str(root / "cache"))
            upstream = Upstream(root / "upstream")
            release(upstream)
            base = f"{registry.host}/vllm/vllm-openai:v1.0.0"
            repo = f"{prefix}-publish"
            project = engram_project(root / "project", upstream, repo, base=base)
            set_platforms(project, PLATFORMS)
            push_skeleton_bases(project, registry.host, "vllm/vllm-openai", "v1.0.0", user_cache())
            proc = imgbuild(project, "lock")
            assert proc.returncode == 0, proc.stderr
        yield World(registry, project, base, repo, root / "cache")
    finally:
        registry.stop()
        remove_images(registry.host + "/")
        remove_images("imgbuild-test-bake/")


def local_id(ref: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()


def published(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {str(v["variant"]): v for v in load_json(proc.stdout)["variants"]}


def test_one_platform_keeps_its_local_digest_in_the_registry(world: World) -> None:
    host, target = world.registry.host, f"{world.repo}-one"  # --repository: the images' repository, here too
    out = published(
        world.publish("engram-mem", "-r", host, "--repository", target, "--platform", "linux/amd64", "--json")
    )
    mem = out["engram-mem"]
    plat = mem["platforms"]["linux/amd64"]  # type: ignore[index]
    # the manifest the registry holds is the local image, digest for digest
    assert plat["manifest"] == local_id(plat["local"])
    pushed = tools.inspect_required(plat["ref"])
    assert not pushed.is_index and pushed.digest == plat["manifest"]
    # one platform: no index; the moving tag names that manifest, as the local moving tag does
    assert mem["immutable"] == plat["ref"] and mem["digest"] == plat["manifest"]
    assert tools.inspect_required(f"{host}/{target}:engram-mem").digest == plat["manifest"]
    assert plat["local"].startswith(f"{target}:") and local_id(f"{target}:engram-mem") == plat["manifest"]
    # the registry's name is for the push only: nothing local is left under it
    assert docker("images", "-q", f"{host}/{target}").stdout.strip() == ""
    assert mem["state"] == "published" and mem["moved"] == ["engram-mem"]


def _refs(variants: dict[str, dict[str, object]]) -> dict[str, object]:
    """variant -> (immutable ref, moving refs, platform -> ref): what a publish names."""
    return {
        k: (v["immutable"], v["moving"], {p: x["ref"] for p, x in v["platforms"].items()})  # type: ignore[attr-defined]
        for k, v in variants.items()
    }


def test_two_platforms_then_again_uploads_nothing(world: World, tmp_path: Path) -> None:
    host, target = world.registry.host, f"{world.repo}-two"
    ask = ("latest", "engram-mem", "-r", host, "--repository", target, "--dry-run", "--json")
    dry = published(world.publish(*ask))
    mark = world.registry.log_mark()
    out = published(world.publish("latest", "engram-mem", "-r", host, "--repository", target, "--json"))
    first = world.registry.requests_since(mark)
    # what the dry run named is what the run pushed, ref for ref; asked again, it names the pushed manifests too
    assert _refs(dry) == _refs(out)
    again_dry = published(world.publish(*ask))
    assert {k: v["platforms"] for k, v in again_dry.items()} == {k: v["platforms"] for k, v in out.items()}
    # recipe and --registry find them under the same --repository
    (world.project / "deploy").mkdir(exist_ok=True)
    shutil.copy(REPO_ROOT / "deploy" / "profiles.yaml", world.project / "deploy" / "profiles.yaml")
    recipe = ("recipe", "engram-mem", "--profile", "TP8-300K", "--repository", target, "--out", str(tmp_path))
    mem = out["engram-mem"]
    local = load_json(imgbuild(world.project, *recipe, "--json").stdout)
    assert local["image"] == str(mem["immutable"]).removeprefix(f"{host}/") and local["image_id"] == mem["digest"]
    remote = load_json(imgbuild(world.project, *recipe, "--registry", host, "--json").stdout)
    assert remote["image"] == f"{host}/{target}@{mem['digest']}"
    for variant, v in out.items():
        platforms = v["platforms"]
        assert sorted(platforms) == PLATFORMS  # type: ignore[arg-type]
        for p in platforms.values():  # type: ignore[attr-defined]
            assert p["manifest"] == local_id(p["local"]) == tools.inspect_required(p["ref"]).digest
        # the moving tag is the local join, digest for digest: an index over exactly those manifests
        index = tools.inspect_required(f"{host}/{target}:{variant}")
        assert index.digest == v["digest"] == local_id(f"{target}:{variant}")
        entries = [(str(p), d) for p, d in index.entries()]
        assert sorted(entries) == sorted((p, platforms[p]["manifest"]) for p in PLATFORMS)  # type: ignore[index]
    # the moving tag is written after the immutable one, and once
    puts = [uri for method, uri, status in first if method == "PUT" and "/manifests/" in uri and status < 300]
    for variant, v in out.items():
        immutable_tag = str(v["immutable"]).rsplit(":", 1)[1]
        assert puts.index(f"/v2/{target}/manifests/{immutable_tag}") < puts.index(f"/v2/{target}/manifests/{variant}")
    # layer sharing: engram-mem's layers are the bottom of latest's, on each platform, in the registry too
    for p in PLATFORMS:
        mem = tools.inspect_required(out["engram-mem"]["platforms"][p]["ref"]).json()["layers"]  # type: ignore[index]
        lat = tools.inspect_required(out["latest"]["platforms"][p]["ref"]).json()["layers"]  # type: ignore[index]
        assert lat[: len(mem)] == mem and len(lat) > len(mem)  # type: ignore[arg-type]
    # again: the same digests, and nothing written to the registry
    mark = world.registry.log_mark()
    again = published(world.publish("latest", "engram-mem", "-r", host, "--repository", target, "--json"))
    assert [v["state"] for v in again.values()] == ["unchanged", "unchanged"]
    assert {k: (v["digest"], v["platforms"]) for k, v in again.items()} == {
        k: (v["digest"], v["platforms"]) for k, v in out.items()
    }
    seen = world.registry.requests_since(mark)
    assert seen and uploads(seen) == [] and not [r for r in seen if r[0] in ("POST", "PUT", "PATCH", "DELETE")]
    # a moving tag moved by hand is put back, and only it is written
    docker(
        "buildx",
        "imagetools",
        "create",
        "-t",
        f"{host}/{target}:latest",
        f"{host}/{target}@{out['engram-mem']['digest']}",
    )
    mark = world.registry.log_mark()
    fixed = published(world.publish("latest", "-r", host, "--repository", target, "--json"))
    assert fixed["latest"]["state"] == "retagged" and fixed["latest"]["moved"] == ["latest"]
    assert [r[1] for r in uploads(world.registry.requests_since(mark))] == [f"/v2/{target}/manifests/latest"]
    # smoke checks the published image, pulled (or found) by digest for its platform
    proc = imgbuild(world.project, "smoke", f"{host}/{target}:engram-mem", "--platform", "linux/amd64", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    report = load_json(proc.stdout)["reports"][0]
    assert report["image"] == f"{host}/{target}@{out['engram-mem']['platforms']['linux/amd64']['manifest']}"  # type: ignore[index]


def test_a_bad_registry_is_exit_9_and_names_the_ref(world: World) -> None:
    gone = f"127.0.0.1:{free_port()}"
    proc = world.publish("engram-mem", "-r", gone, "--platform", "linux/amd64")
    assert proc.returncode == 9, proc.stdout[-2000:] + proc.stderr[-2000:]
    # asked before the build: the moving tag it would write is named, nothing was built or smoke-tested
    err = " ".join(proc.stderr.split())
    assert f"cannot publish to {gone}" in err and f"{gone}/{world.repo}:engram-mem" in err, err
    assert "connection refused" in err and f"is the registry at {gone} running" in err, err
    assert "smoke-testing" not in proc.stderr and "pushing" not in proc.stderr
    dry = world.publish("engram-mem", "-r", gone, "--platform", "linux/amd64", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = load_json(dry.stdout)
    assert plan["dry_run"] and plan["variants"][0]["moving"] == [f"{gone}/{world.repo}:engram-mem"]


def _docker_config(path: Path, host: str | None = None, user: str = "", password: str = "") -> Path:
    """A DOCKER_CONFIG with `host`'s credentials (or none), and the CLI plugins (buildx) of the user's."""
    import base64

    path.mkdir(parents=True, exist_ok=True)
    plugins = Path.home() / ".docker" / "cli-plugins"
    if plugins.is_dir():
        (path / "cli-plugins").symlink_to(plugins)
    auths = {host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}} if host else {}
    (path / "config.json").write_text(json.dumps({"auths": auths}))
    return path


def test_credentials_are_dockers_own(world: World, tmp_path: Path) -> None:
    secret = "pw-Zq8v-never-printed"
    htpasswd = subprocess.run(["htpasswd", "-Bbn", "ci", secret], capture_output=True, text=True, check=True).stdout
    (tmp_path / "htpasswd").write_text(htpasswd)
    guarded = RegistryProcess.start(tmp_path / "guarded", tmp_path / "htpasswd")
    try:
        args = ("engram-mem", "-r", guarded.host, "--platform", "linux/amd64")
        proc = world.publish(*args, env={"DOCKER_CONFIG": str(_docker_config(tmp_path / "none"))})
        assert proc.returncode == 9, proc.stdout[-2000:] + proc.stderr[-2000:]
        err = " ".join(proc.stderr.split())
        assert f"the registry at {guarded.host} asks for credentials" in err, err
        assert f"{guarded.host}/{world.repo}:engram-mem" in err and f"docker login {guarded.host}" in err, err
        assert f"has no credentials for {guarded.host}" in err and "smoke-testing" not in err, err
        wrong = _docker_config(tmp_path / "wrong", guarded.host, "ci", "not-the-password")
        proc = world.publish(*args, env={"DOCKER_CONFIG": str(wrong)})
        assert proc.returncode == 9, proc.stdout[-2000:] + proc.stderr[-2000:]
        err = " ".join(proc.stderr.split())
        assert f"the registry refused the credentials the docker config holds for {guarded.host}" in err, err
        assert f"the `auths` entry in {wrong}/config.json" in err and "log in first" not in err, err
        good = _docker_config(tmp_path / "good", guarded.host, "ci", secret)
        proc = world.publish(*args, "--json", env={"DOCKER_CONFIG": str(good)})
        out = published(proc)
        assert secret not in proc.stdout + proc.stderr
        plat = out["engram-mem"]["platforms"]["linux/amd64"]  # type: ignore[index]
        assert plat["manifest"] == local_id(plat["local"])
        # published before: wrong credentials are said as such on the first read, in text and in --json
        for extra in ((), ("--json",)):
            proc = world.publish(*args, *extra, env={"DOCKER_CONFIG": str(wrong)})
            assert proc.returncode == 9, proc.stdout[-2000:] + proc.stderr[-2000:]
            said = " ".join((proc.stdout + proc.stderr).split())
            assert f"the registry at {guarded.host} refused the credentials docker holds for it" in said, said
            assert f"the `auths` entry in {wrong}/config.json" in said, said
    finally:
        guarded.stop()
        remove_images(guarded.host + "/")


def _key_pair(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COSIGN_PASSWORD": ""}
    subprocess.run(["cosign", "generate-key-pair"], cwd=directory, env=env, capture_output=True, check=True)
    return directory / "cosign.key", directory / "cosign.pub"


def test_publish_with_sbom_and_signature_and_smoke_verifies_them(world: World, tmp_path: Path) -> None:
    needs.tool("cosign", "docker", "publish --sign and smoke --key run it")
    key, pub_key = _key_pair(tmp_path / "keys")
    host, env = world.registry.host, {"COSIGN_PASSWORD": ""}
    args = ("engram-mem", "-r", host, "--repository", f"{world.repo}-t6", "--platform", "linux/amd64")
    out = published(world.publish(*args, "--json", "--sbom", "--sign", "--key", str(key), env=env))
    index = out["engram-mem"]["digest"]
    done = load_json(world.publish(*args, "--json", "--sign", "--key", str(key), env=env).stdout)
    assert done["variants"][0]["state"] == "unchanged"
    ref = f"{host}/{world.repo}-t6:engram-mem"
    check = ("smoke", ref, "--static", "--platform", "linux/amd64")
    proc = imgbuild(world.project, *check, "--json", "--key", str(pub_key))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    (report,) = load_json(proc.stdout)["reports"]
    assert report["ok"] and report["files"] and report["platform"] == "linux/amd64", report
    chain = report["supply_chain"]
    assert chain["ok"] and chain["signature"]["verified"] and chain["sbom"]["verified"], chain
    assert chain["sbom"]["problems"] == []  # its files and sha256 and its base match the image
    _, other = _key_pair(tmp_path / "other")
    proc = imgbuild(world.project, *check, "--json", "--key", str(other))
    assert proc.returncode == 8, proc.stdout[-3000:] + proc.stderr
    doc = load_json(proc.stdout)
    chain = doc["reports"][0]["supply_chain"]
    assert not doc["ok"] and doc["reports"][0]["ok"]  # the checks pass; the signature does not
    assert not chain["ok"] and not chain["signature"]["verified"] and not chain["sbom"]["verified"], chain
    text = imgbuild(world.project, *check, "--key", str(other))  # the same, as people read it
    assert text.returncode == 8 and "missing or not verified" in text.stdout
    assert "signature not verified; SBOM not verified" in text.stderr
    assert (
        f"signature {host}/{world.repo}-t6@{index}"
        in load_json(world.publish(*args, "--json", "--sign", "--key", str(key), env=env).stdout)["attached"]
    )
    unsigned = world.publish(*args, "--sbom")  # --sbom without --key: usage error, nothing pushed
    assert unsigned.returncode == 2 and "--key" in unsigned.stderr


def test_lock_resolves_bases_with_imagetools_and_notices_a_moved_tag(world: World, tmp_path: Path) -> None:
    project = Path(shutil.copytree(world.project, tmp_path / "p"))
    lock = load_lock(project)
    assert lock is not None
    index = tools.inspect_required(world.base)
    locked = lock.bases[world.base]
    assert locked.digest == index.digest and dict(locked.platforms) == {p: d for p, d in index.entries() if p}
    moving = f"{world.registry.host}/vllm/vllm-openai:moving"
    docker("buildx", "imagetools", "create", "-t", moving, world.base)
    set_platforms(project, PLATFORMS, base=moving)
    assert imgbuild(project, "lock").returncode == 0
    assert imgbuild(project, "lock", "--check").returncode == 0
    # the tag moves to the arm64 manifest alone (not an index): stale, and a platform is missing
    arm = f"{world.registry.host}/vllm/vllm-openai:v1.0.0-arm64"
    docker(
        "buildx",
        "imagetools",
        "create",
        "-t",
        moving,
        f"{world.registry.host}/vllm/vllm-openai@{dict(locked.platforms)[Platform.parse('linux/arm64')]}",
    )
    assert tools.inspect_required(arm).digest == dict(locked.platforms)[Platform.parse("linux/arm64")]
    proc = imgbuild(project, "lock", "--check")
    assert proc.returncode == 1 and f"base {moving}: locked sha256:" in proc.stderr
    assert imgbuild(project, "lock", "--check", "--offline").returncode == 0  # the files alone still agree
    set_platforms(project, ["linux/arm64"], base=arm)  # a single manifest: its platform comes from its config
    assert imgbuild(project, "lock").returncode == 0
    lock = load_lock(project)
    found = lock.bases[arm].platforms if lock is not None else ()
    assert found == ((Platform.parse("linux/arm64"), tools.inspect_required(arm).digest),)
    set_platforms(project, PLATFORMS, base=arm)
    proc = imgbuild(project, "lock")
    assert proc.returncode == 9 and "has no linux/amd64 image" in proc.stderr
    set_platforms(project, PLATFORMS, base=f"{world.registry.host}/vllm/nothing:v1")
    proc = imgbuild(project, "lock")
    assert proc.returncode == 9 and f"{world.registry.host}/vllm/nothing:v1 is not in the registry" in proc.stderr


def plan_step(project: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The step of .github/workflows/images.yml that computes the build and merge matrices, run in `project`
    as CI runs it on its checkout (REGISTRY in its environment): the process and its GITHUB_OUTPUT values."""
    needs.tool("jq", "docker", "the images workflow's plan step reads buildx's listing with it")
    workflow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "images.yml").read_text())
    step = next(s for s in workflow["jobs"]["plan"]["steps"] if s.get("id") == "matrix")
    output = project / "github-output"
    output.write_text("")
    # RUNNERS is `${{ vars.IMGBUILD_RUNNERS || '<JSON>' }}`: the default, as GitHub gives it without the variable
    runners = re.fullmatch(r"\$\{\{ vars\.IMGBUILD_RUNNERS \|\| '(\{.*\})' \}\}", step["env"]["RUNNERS"])
    assert runners is not None, step["env"]["RUNNERS"]
    given = {"ALL": "", "RUNNERS": runners.group(1), "GITHUB_OUTPUT": str(output), **env}
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=project, env={**os.environ, **given}, capture_output=True, text=True
    )
    values = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return done, {k: json.loads(v) for k, v in values.items()}


def test_bake_file_builds_both_variants_with_a_shared_layer(world: World, tmp_path: Path) -> None:
    project = Path(shutil.copytree(world.project, tmp_path / "p"))
    assert imgbuild(project, "bake").returncode == 0
    assert imgbuild(project, "bake", "--check").returncode == 0
    bake_file = "buildkit/docker-bake.json"
    printed = subprocess.run(
        ["docker", "buildx", "bake", "-f", bake_file, "--print"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr
    resolved = json.loads(printed.stdout)
    assert "FROM ${BASE}" in resolved["target"]["latest"]["dockerfile-inline"]
    env = {**os.environ, "REGISTRY": "imgbuild-test-bake"}
    build = subprocess.run(
        [
            "docker",
            "buildx",
            "bake",
            "-f",
            bake_file,
            "--load",
            "--set",
            "*.platform=linux/arm64",
            "engram-mem",
            "latest",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    mem = json.loads(docker("image", "inspect", f"imgbuild-test-bake/{world.repo}:engram-mem").stdout)[0]
    latest = json.loads(docker("image", "inspect", f"imgbuild-test-bake/{world.repo}:latest").stdout)[0]
    assert mem["Architecture"] == latest["Architecture"] == "arm64"
    m, lat = mem["RootFS"]["Layers"], latest["RootFS"]["Layers"]
    assert lat[: len(m)] == m and len(lat) == len(m) + 1
    # CI's plan (images.yml) asks the registry for each immutable tag: engram-mem's is there, latest's is not
    immutable = resolved["target"]["engram-mem"]["tags"][0].rsplit(":", 1)[1]
    image = f"{world.registry.host}/{world.repo}"
    docker("tag", f"imgbuild-test-bake/{world.repo}:{immutable}", f"{image}:{immutable}")
    docker("push", "-q", f"{image}:{immutable}")
    done, out = plan_step(project, REGISTRY=world.registry.host)
    assert done.returncode == 0, done.stderr
    assert f"{image}:{immutable}: in the registry" in done.stdout
    assert out["build"] == [
        {"variant": "latest", "platform": p, "arch": p.split("/")[1], "runner": runner, "qemu": False, "image": image}
        for p, runner in zip(PLATFORMS, ["ubuntu-24.04", "ubuntu-24.04-arm"], strict=True)
    ]
    tags = resolved["target"]["latest"]["tags"]  # under the bake file's default REGISTRY
    assert out["merge"] == [
        {"variant": "latest", "image": image, "tags": " ".join(f"{image}:{t.rsplit(':', 1)[1]}" for t in tags)}
    ]
    assert out["changed"] is True
    done, out = plan_step(project, REGISTRY=world.registry.host, ALL="true")  # workflow_dispatch's `all`
    assert done.returncode == 0 and [m["variant"] for m in out["merge"]] == ["engram-mem", "latest"]
    # a registry that does not answer is no answer: the step fails rather than guess
    done, _ = plan_step(project, REGISTRY=f"127.0.0.1:{free_port()}")
    assert done.returncode != 0 and "dial tcp" in done.stderr


def test_the_committed_bake_file_is_accepted_by_buildx() -> None:
    root = Path(__file__).resolve().parents[2]  # the repository root (this file is tests/docker/)
    printed = subprocess.run(
        ["docker", "buildx", "bake", "-f", "buildkit/docker-bake.json", "--print"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr
    assert set(json.loads(printed.stdout)["target"]) == {p.stem for p in (root / "images").glob("*.yaml")}
