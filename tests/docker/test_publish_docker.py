"""Publishing into a real registry (Debian's docker-registry on loopback) with the real engine.

One registry and one pair of skeleton bases (amd64 and arm64, pushed with
`docker push` and joined with `docker buildx imagetools create`) serve the
whole module; each test publishes into its own repository. Uploads are
counted both by imgbuild's own stats and from the registry's access log.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imgbuild.errors import RegistryError
from imgbuild.images import publish as pub
from imgbuild.images.docker import Engine
from imgbuild.project import Project
from imgbuild.registry import reference
from imgbuild.registry.client import Registry, Stats
from imgbuild.registry.lock import load_lock
from tests.support.registry_env import (
    RegistryProcess,
    docker,
    push_skeleton_bases,
    remove_images,
    set_platforms,
    uploads,
)
from tests.support.runner import imgbuild
from tests.support.synth import Upstream
from tests.support.synth_images import SITE, engram_project, release
from tests.support.tcpproxy import Proxy

pytestmark = pytest.mark.docker
PLATFORMS = ["linux/arm64", "linux/amd64"]


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild"


@dataclass
class World:
    registry: RegistryProcess
    project: Path  # a synthetic project whose base is in `registry`, locked
    base: str
    upstream: Upstream


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("publish")
    registry = RegistryProcess.start(root / "registry")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("IMGBUILD_CACHE", str(root / "cache"))
            upstream = Upstream(root / "upstream")
            release(upstream)
            base = f"{registry.host}/vllm/vllm-openai:v1.0.0"
            project = engram_project(root / "project", upstream, "vllm-dsv41", base=base)
            set_platforms(project, PLATFORMS)
            push_skeleton_bases(project, registry.host, "vllm/vllm-openai", "v1.0.0", user_cache())
            proc = imgbuild(project, "lock")
            assert proc.returncode == 0, proc.stderr
        yield World(registry, project, base, upstream)
    finally:
        registry.stop()
        remove_images(registry.host + "/")
        remove_images("imgbuild-test-bake/")


def publish(
    project: Path, registry: str, repository: str, variants: tuple[str, ...] = ("latest", "engram-mem")
) -> tuple[list[pub.VariantPublish], list[pub.Outcome], Stats]:
    proj = Project.load(project)
    selection = proj.select(list(variants), default="declared")
    r = pub.publish(proj, selection, registry, repository=repository, say=lambda _: None)
    assert r.outcomes is not None and r.stats is not None
    return r.plan, r.outcomes, r.stats


def copy_project(world: World, dest: Path) -> Path:
    shutil.copytree(world.project, dest)
    return dest


def test_publish_both_variants_for_both_platforms_and_pull_them_back(world: World) -> None:
    plan, outcomes, stats = publish(world.project, world.registry.host, "t1/vllm-dsv41")
    assert [o.state for o in outcomes] == ["published", "published"]
    by = {vp.variant: vp for vp in plan}
    latest, mem = by["latest"], by["engram-mem"]
    # the base was mounted, never uploaded: only new layers, configs and manifests went up
    assert stats.blobs_mounted and not set(stats.blobs_uploaded) & set(stats.blobs_mounted)
    new_bytes = sum(len(pi.config.data) for vp in plan for pi in vp.images)
    new_bytes += sum({lay.blob.digest: lay.blob.size for vp in plan for pi in vp.images for lay in pi.layers}.values())
    assert stats.bytes_up <= 1.1 * (new_bytes + sum(len(vp.index.data) for vp in plan) * 2 + 8 * 2048)
    with Registry(reference.parse(world.registry.host + "/x")) as reg:
        for vp in plan:
            index = reg.get_manifest(vp.target.repository, vp.moving_tags[0])
            assert index.digest == vp.index.digest
            platforms = sorted(
                f"{m['platform']['os']}/{m['platform']['architecture']}" for m in index.json()["manifests"]
            )
            assert platforms == ["linux/amd64", "linux/arm64"]  # no unknown/unknown entries
            assert reg.head_manifest(vp.target.repository, vp.immutable_tag) == vp.index.digest
    # layer sharing: engram-mem's only new layer is latest's first, on both platforms, one blob
    for p in PLATFORMS:
        lat = next(pi for pi in latest.images if pi.build.platform == p)
        em = next(pi for pi in mem.images if pi.build.platform == p)
        assert [x.blob.digest for x in em.layers] == [lat.layers[0].blob.digest] and len(lat.layers) == 2
    assert len({pi.layers[0].blob.digest for vp in plan for pi in vp.images}) == 1
    # pull each platform back by digest and look inside
    engine = Engine.connect()
    for pi in latest.images:
        ref = f"{latest.target.name}@{pi.manifest.digest}"
        docker("pull", "--platform", pi.build.platform, ref)
        info = engine.require(ref)
        assert info.platform == pi.build.platform
        assert info.entrypoint is None and info.cmd is None
        assert info.labels["imgbuild.inputs"] == pi.build.inputs_digest
        assert "DSV41_ENGRAM_DISK=1" in info.env
        files = engine.read_files(ref, [f"{SITE}/vllm/models/engram.py"], pi.build.platform)
        assert b"# disk" in (files[f"{SITE}/vllm/models/engram.py"] or b"")
    # smoke and inspect work on the registry reference (pulled by digest for this platform)
    ref = f"{mem.target.name}:engram-mem"
    for platform in PLATFORMS:
        proc = imgbuild(world.project, "smoke", ref, "--platform", platform, "--json")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        report = json.loads(proc.stdout)
        assert report["ok"] and report["reports"][0]["platform"] == platform
        digest = next(pi.manifest.digest for pi in mem.images if pi.build.platform == platform)
        assert report["reports"][0]["image"] == f"{mem.target.name}@{digest}"  # pulled by digest
        proc = imgbuild(world.project, "inspect", ref, "--platform", platform, "--json")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        inspected = json.loads(proc.stdout)
        assert inspected["platform"] == platform and inspected["patches"]["0003-engram"] == "reverted"


def test_equal_inputs_give_equal_digests_from_other_working_dirs(world: World, tmp_path: Path) -> None:
    a = copy_project(world, tmp_path / "a" / "checkout")
    b = copy_project(world, tmp_path / "elsewhere" / "b")
    plan_a, _, _ = publish(a, world.registry.host, "t2a/vllm-dsv41")
    os.environ["IMGBUILD_CACHE"] = str(tmp_path / "another-cache")  # reset by the autouse fixture
    plan_b, _, _ = publish(b, world.registry.host, "t2b/vllm-dsv41")

    def digests(plan: list[pub.VariantPublish]) -> list[object]:
        out: list[object] = []
        for vp in plan:
            data = vp.to_json()
            out.append([data["variant"], data["index"], data["platforms"], vp.immutable_tag, vp.moving_tags])
        return out

    assert digests(plan_a) == digests(plan_b)
    # the same bytes landed in the registry: the blobs are the same files
    with Registry(reference.parse(world.registry.host + "/x")) as reg:
        for vp in plan_b:
            for pi in vp.images:
                for lay in pi.layers:
                    assert reg.blob_size("t2a/vllm-dsv41", lay.blob.digest) == lay.blob.size


def test_publishing_again_uploads_nothing(world: World) -> None:
    publish(world.project, world.registry.host, "t3/vllm-dsv41")
    mark = world.registry.log_mark()
    plan, outcomes, stats = publish(world.project, world.registry.host, "t3/vllm-dsv41")
    assert [o.state for o in outcomes] == ["unchanged", "unchanged"]
    assert stats.uploads == 0 and stats.bytes_up == 0 and not stats.blobs_mounted
    seen = world.registry.requests_since(mark)
    assert seen and uploads(seen) == []
    assert not [r for r in seen if r[0] in ("POST", "PUT", "PATCH", "DELETE")]
    # moving a tag by hand is repaired by the next publish, with one small manifest PUT
    with Registry(reference.parse(world.registry.host + "/x")) as reg:
        other = plan[1].index
        reg.put_manifest("t3/vllm-dsv41", "latest", other.data, plan[1].index_type)
    mark = world.registry.log_mark()
    _, outcomes, stats = publish(world.project, world.registry.host, "t3/vllm-dsv41")
    assert outcomes[0].state == "retagged" and outcomes[0].moved == ["latest"]
    assert [r[0] for r in uploads(world.registry.requests_since(mark))] == ["PUT"]


def test_cli_publish_json_and_dry_run(world: World) -> None:
    proc = imgbuild(
        world.project, "publish", "engram-mem", "-r", world.registry.host, "--repository", "t4/x", "--dry-run", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    dry = json.loads(proc.stdout)
    assert dry["dry_run"] and dry["variants"][0]["variant"] == "engram-mem"
    proc = imgbuild(world.project, "publish", "engram-mem", "-r", world.registry.host, "--repository", "t4/x", "--json")
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    assert done["variants"][0]["index"] == dry["variants"][0]["index"]
    assert done["variants"][0]["state"] == "published" and done["stats"]["blobs_uploaded"] == 3  # 1 layer + 2 configs


def _key_pair(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COSIGN_PASSWORD": ""}
    subprocess.run(["cosign", "generate-key-pair"], cwd=directory, env=env, capture_output=True, check=True)
    return directory / "cosign.key", directory / "cosign.pub"


def test_publish_with_sbom_and_signature_and_inspect_verifies_them(world: World, tmp_path: Path) -> None:
    if shutil.which("cosign") is None:
        pytest.skip("cosign is not installed (.ci/setup-host.sh installs trixie's cosign 2.5)")
    key, pub_key = _key_pair(tmp_path / "keys")
    host, env = world.registry.host, {"COSIGN_PASSWORD": ""}
    args = ("publish", "engram-mem", "-r", host, "--repository", "t6/vllm-dsv41", "--json")
    proc = imgbuild(world.project, *args, "--sbom", "--sign", "--key", str(key), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = json.loads(proc.stdout)
    index = done["variants"][0]["index"]
    assert sorted(a.split()[0] for a in done["attached"]) == ["sbom", "sbom", "signature"]
    assert f"signature {host}/t6/vllm-dsv41@{index}" in done["attached"]
    ref = f"{host}/t6/vllm-dsv41:engram-mem"
    for platform in PLATFORMS:
        proc = imgbuild(world.project, "inspect", ref, "--platform", platform, "--key", str(pub_key), "--json")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        chain = json.loads(proc.stdout)["supply_chain"]
        assert chain["ok"] and chain["signature"]["verified"] and chain["sbom"]["verified"], chain
        assert chain["sbom"]["problems"] == []  # its files and sha256 and its base digest match the image
    text = imgbuild(world.project, "inspect", ref, "--platform", "linux/arm64", "--key", str(pub_key)).stdout
    assert "signature" in text and "verified" in text
    _, other = _key_pair(tmp_path / "other")
    proc = imgbuild(world.project, "inspect", ref, "--platform", "linux/arm64", "--key", str(other), "--json")
    assert proc.returncode == 1
    chain = json.loads(proc.stdout)["supply_chain"]
    assert not chain["signature"]["verified"] and not chain["sbom"]["verified"]
    unsigned = imgbuild(world.project, *args[:-1], "--sbom")  # --sbom without --key: usage error, nothing pushed
    assert unsigned.returncode == 2 and "--key" in unsigned.stderr


def _htpasswd(path: Path, user: str, password: str) -> None:
    out = subprocess.run(["htpasswd", "-Bbn", user, password], capture_output=True, text=True, check=True).stdout
    path.write_text(out)


def _docker_config(path: Path, host: str, user: str, password: str) -> Path:
    import base64

    path.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (path / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return path


def test_auth_failure_is_clear_and_tags_nothing(world: World, tmp_path: Path) -> None:
    secret = "pw-Zq8v-never-printed"
    _htpasswd(tmp_path / "htpasswd", "ci", secret)
    guarded = RegistryProcess.start(tmp_path / "guarded", tmp_path / "htpasswd")
    try:
        # no credentials at all
        env = {"DOCKER_CONFIG": str(tmp_path / "empty")}
        proc = imgbuild(world.project, "publish", "engram-mem", "-r", guarded.host, env=env)
        assert proc.returncode == 9, proc.stderr
        assert f"registry {guarded.host} asks for a user name and password" in proc.stderr
        assert f"docker login {guarded.host}" in proc.stderr
        # wrong password: refused, and the password it tried is not echoed
        env = {"DOCKER_CONFIG": str(_docker_config(tmp_path / "wrong", guarded.host, "ci", "not-" + secret))}
        proc = imgbuild(world.project, "publish", "engram-mem", "-r", guarded.host, env=env)
        assert proc.returncode == 9 and "refused the credentials" in proc.stderr and "user 'ci'" in proc.stderr
        assert secret not in proc.stderr + proc.stdout
        good = _docker_config(tmp_path / "good", guarded.host, "ci", secret)
        os.environ["DOCKER_CONFIG"] = str(good)
        try:
            with Registry(reference.parse(guarded.host + "/vllm-dsv41")) as reg:
                assert reg.head_manifest("vllm-dsv41", "engram-mem") is None  # nothing was tagged
            # with the right credentials: the base is copied across registries, nothing pulled
            proc = imgbuild(
                world.project,
                "publish",
                "engram-mem",
                "latest",
                "-r",
                guarded.host,
                "--json",
                env={"DOCKER_CONFIG": str(good)},
            )
            assert proc.returncode == 0, proc.stderr
            assert secret not in proc.stdout + proc.stderr
            with Registry(reference.parse(guarded.host + "/vllm-dsv41")) as reg:
                assert reg.head_manifest("vllm-dsv41", "engram-mem") is not None
        finally:
            del os.environ["DOCKER_CONFIG"]
        # and the secret is in no stored manifest, config or layer
        for blob in (tmp_path / "guarded").rglob("data"):
            raw = blob.read_bytes()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            assert secret.encode() not in raw, blob
    finally:
        guarded.stop()


def test_an_interrupted_upload_is_completed_by_the_next_publish(world: World, tmp_path: Path) -> None:
    target = RegistryProcess.start(tmp_path / "target")
    try:
        with Proxy(target.port, cut_after=4 << 20) as flaky:
            with pytest.raises(RegistryError, match=r"/blobs/uploads/.* failed: ConnectionError") as failure:
                publish(world.project, flaky.host, "vllm-dsv41")
            assert flaky.cut and failure.value.hint and "publishing again completes" in failure.value.hint
        with Registry(reference.parse(target.host + "/vllm-dsv41")) as reg:
            for tag in ("latest", "engram-mem"):
                assert reg.head_manifest("vllm-dsv41", tag) is None  # no tag moved
        plan, outcomes, stats = publish(world.project, target.host, "vllm-dsv41")
        assert [o.state for o in outcomes] == ["published", "published"]
        assert stats.bytes_up > 4 << 20  # the base blobs were copied across registries
        engine = Engine.connect()
        for pi in plan[1].images:
            ref = f"{plan[1].target.name}@{pi.manifest.digest}"
            docker("pull", "--platform", pi.build.platform, ref)
            assert engine.require(ref).platform == pi.build.platform
    finally:
        target.stop()
        remove_images(target.host + "/")


def test_lock_check_notices_a_moved_base_tag(world: World, tmp_path: Path) -> None:
    project = copy_project(world, tmp_path / "p")
    moving = f"{world.registry.host}/vllm/vllm-openai:moving"
    docker("buildx", "imagetools", "create", "-t", moving, world.base)
    set_platforms(project, PLATFORMS, base=moving)
    assert imgbuild(project, "lock").returncode == 0
    assert imgbuild(project, "lock", "--check").returncode == 0
    lock = load_lock(project)
    assert lock is not None and set(dict(lock.bases[moving].platforms)) == set(PLATFORMS)
    # the tag moves to an index with only arm64: stale, and a platform is missing
    docker("buildx", "imagetools", "create", "-t", moving, f"{world.registry.host}/vllm/vllm-openai:v1.0.0-arm64")
    proc = imgbuild(project, "lock", "--check")
    assert proc.returncode == 1 and f"base {moving}: locked sha256:" in proc.stderr
    assert imgbuild(project, "lock", "--check", "--offline").returncode == 0  # the files alone still agree
    proc = imgbuild(project, "lock")
    assert proc.returncode == 9 and "has no linux/amd64 image" in proc.stderr


def test_bake_file_builds_both_variants_with_a_shared_layer(world: World, tmp_path: Path) -> None:
    project = copy_project(world, tmp_path / "p")
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
    assert resolved["target"]["latest"]["tags"][1] == "localhost:5000/vllm-dsv41:latest"  # the default REGISTRY
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
    engine = Engine.connect()
    mem = engine.require("imgbuild-test-bake/vllm-dsv41:engram-mem")
    latest = engine.require("imgbuild-test-bake/vllm-dsv41:latest")
    assert mem.arch == latest.arch == "arm64"
    assert latest.layers[: len(mem.layers)] == mem.layers and len(latest.layers) == len(mem.layers) + 1
    target = resolved["target"]["engram-mem"]
    assert {k: mem.labels.get(k) for k in target["labels"]} == target["labels"]
    assert mem.entrypoint is None and not mem.cmd
    proc = imgbuild(project, "smoke", "imgbuild-test-bake/vllm-dsv41:engram-mem", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert json.loads(proc.stdout)["ok"]


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


def copy_image(src_host: str, src_repo: str, tag: str, dst_host: str, dst_repo: str) -> None:
    """Registry to registry with imgbuild's client: every platform, then the index under `tag`."""
    with Registry(reference.parse(f"{src_host}/{src_repo}")) as src, Registry(reference.parse(f"{dst_host}/x")) as dst:
        index = src.get_manifest(src_repo, tag)
        for entry in index.json()["manifests"]:
            man = src.get_manifest(src_repo, entry["digest"])
            body = man.json()
            for digest in [body["config"]["digest"], *(layer["digest"] for layer in body["layers"])]:
                dst.ensure_blob(dst_repo, digest, copy_from=(src, src_repo))
            dst.put_manifest(dst_repo, man.digest, man.data, man.media_type)
        dst.put_manifest(dst_repo, tag, index.data, index.media_type)


def test_bearer_token_auth_and_mounts_across_repositories(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.tokenserver import TokenService, start_token_registry

    secret = "tok-Pw-7781-never-printed"
    tokens = TokenService({"ci": secret})
    guarded = start_token_registry(tmp_path / "tokreg", tokens)
    try:
        # anonymous: the token service refuses, and the message says how to log in
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty"))
        with pytest.raises(RegistryError, match="token service refused") as refused:
            copy_image(world.registry.host, "vllm/vllm-openai", "v1.0.0", guarded.host, "mirror/vllm-openai")
        assert refused.value.hint and f"docker login {guarded.host}" in refused.value.hint
        monkeypatch.setenv("DOCKER_CONFIG", str(_docker_config(tmp_path / "cfg", guarded.host, "ci", secret)))
        copy_image(world.registry.host, "vllm/vllm-openai", "v1.0.0", guarded.host, "mirror/vllm-openai")
        project = copy_project(world, tmp_path / "p")
        set_platforms(project, PLATFORMS, base=f"{guarded.host}/mirror/vllm-openai:v1.0.0")
        proc = imgbuild(project, "lock")
        assert proc.returncode == 0, proc.stderr
        tokens.requests.clear()
        plan, outcomes, stats = publish(project, guarded.host, "team/vllm-dsv41")
        assert [o.state for o in outcomes] == ["published", "published"]
        assert stats.blobs_mounted  # the base's blobs, mounted from mirror/vllm-openai
        granted = [sorted(scopes) for user, scopes in tokens.requests if user == "ci"]
        assert ["repository:mirror/vllm-openai:pull", "repository:team/vllm-dsv41:pull,push"] in granted
        assert all(secret not in json.dumps(vp.to_json()) for vp in plan)
    finally:
        guarded.stop()
        tokens.close()
