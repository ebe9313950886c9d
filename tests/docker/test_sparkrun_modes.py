"""`builder: imgbuild` in sparkrun's other modes, through sparkrun 0.4.2's own code (its venv, a subprocess).

- Delegated: `sparkrun build RECIPE --hosts HEAD --transfer-mode delegated [--offline]`, sparkrun's own command.
  The plugin builds on the head over sparkrun's SSH, so the image is made in the head's engine (the node dockerd of
  tests/support/node_daemon.py behind the sshd of tests/support/sshd.py, as in test_sparkrun_distribution.py) and
  none on this machine; sparkrun's distribution then finds the head up to date, and `--offline` succeeds from the
  head's cache. On a cold head sparkrun's offline preflight refuses before any builder; past it (sparkrun's
  `prepare_images` with `offline: True` in the builder context, tests/support/sparkrun_distribute.py) imgbuild
  fetches nothing and names the release to fetch. With a git URL (`file://`) at a `revision`, the head clones it
  and builds that commit.
- Offline on the control machine, in a network namespace with no network at all (`unshare -n`): a cold cache is
  an OfflineError naming what to fetch, a warm one builds.
- A published variant, through sparkrun's own commands on a node that looks like a one-GB10 Spark (the stand-in
  `nvidia-smi` and NVIDIA hook of tests/support/node-bin/): `sparkrun export recipe --realize` places it and pins
  the registry's digest (through the builder's `pull_ref`; a local build has none, and sparkrun says so), and
  `sparkrun run` of the realized recipe pulls that digest on the node, even after the tag moved, and prints the
  image's pins and patches under "Runtime versions:".
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imgbuild.cache import cache_dir
from imgbuild.engine import Engine
from tests.docker.conftest import MakeProject, run_cli
from tests.docker.test_sparkrun_distribution import DRIVER, PYTHON, recipe, sparkrun_env
from tests.support.node_daemon import Node, node_daemon, node_path
from tests.support.registry_env import RegistryProcess
from tests.support.sshd import SSHD, Sshd, sshd_to

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """A node dockerd on the containerd store (its own bridge and containerd), as in the distribution test."""
    with node_daemon(tmp_path / "node", "br-imgb-srm", containerd_store=True, address="10.214.80.1/24", gpu=True) as n:
        yield n


@pytest.fixture
def head(tmp_path: Path, node: Node) -> Iterator[Sshd]:
    """The head: the node dockerd behind an sshd whose logins keep imgbuild's caches under tmp_path."""
    if not Path(SSHD).exists():
        pytest.fail(f"{SSHD} is missing: run `bash .ci/setup-sshd.sh`")
    login = {"XDG_CACHE_HOME": str(tmp_path / "head-cache"), "PATH": node_path()}  # node_path: the stand-in nvidia-smi
    with sshd_to(tmp_path / "sshd", node.socket, env=login) as s:
        yield s


def driver(env: dict[str, str], *args: str, netns: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [str(PYTHON), str(DRIVER), *args]
    return subprocess.run(
        ["unshare", "-n", *argv] if netns else argv, env=env, capture_output=True, text=True, check=False, timeout=900
    )


def last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-6000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def with_rootfs(cache: Path) -> Path:
    """`cache` holding the skeleton's rootfs tar that the session's skeleton fixture made (a hard link), so the
    head builds its skeleton base from it instead of running mmdebstrap."""
    (cache / "skeleton").mkdir(parents=True, exist_ok=True)
    for tar in (cache_dir() / "skeleton").glob("rootfs-*.tar"):
        try:
            os.link(tar, cache / "skeleton" / tar.name)
        except OSError:
            shutil.copy(tar, cache / "skeleton" / tar.name)
    return cache


def test_delegated_builds_on_the_head_offline_from_its_cache_and_info_shows_the_labels(
    tmp_path: Path,
    make_project: MakeProject,
    prefix: str,
    engine: Engine,
    node: Node,
    head: Sshd,
) -> None:
    assert PYTHON.exists(), f"{PYTHON} is missing: run `bash .ci/setup-sparkrun.sh`"
    project = make_project("srdel")
    repo = f"{prefix}-srdel"
    head_cache = with_rootfs(tmp_path / "head-cache" / "imgbuild")
    env = sparkrun_env(tmp_path / "sparkrun", head, tmp_path / "control-cache")
    # what runs on the head (same machine, the node's engine through the login's DOCKER_HOST): this checkout
    env["IMGBUILD_COMMAND"] = (
        f"env PYTHONPATH={ROOT / 'src'} IMGBUILD_BASE=skeleton IMGBUILD_CACHE={head_cache} {sys.executable} -m imgbuild"
    )
    path = recipe(tmp_path / "recipe.yaml", project, repo)
    data = yaml.safe_load(path.read_text())
    data["model"] = str(tmp_path / "models" / "dsv41")  # weights already on the node: nothing to download
    (tmp_path / "models" / "dsv41").mkdir(parents=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))

    def build(*more: str) -> subprocess.CompletedProcess[str]:
        """`sparkrun build RECIPE --hosts HEAD --transfer-mode delegated ...`: the command a user runs."""
        argv = [
            str(PYTHON.parent / "sparkrun"),
            "build",
            str(path),
            "--hosts",
            head.host,
            "--transfer-mode",
            "delegated",
        ]
        return subprocess.run([*argv, *more], env=env, capture_output=True, text=True, check=False, timeout=900)

    # a cold head, offline: sparkrun's own preflight refuses first (it checks the recipe's `container` on the head
    # before any builder runs), naming the image
    refused = build("--offline")
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "Offline launch cannot proceed" in said, said
    assert f"image {repo}:latest: missing on node1" in said
    # past that preflight (sparkrun's prepare_images with offline in the builder context, as `build` passes it):
    # imgbuild fetches nothing, and its error names the release and how to fetch it
    cold = driver(env, "--transfer-mode", "delegated", "--offline", "--prepare-only", str(path), head.host)
    assert cold.returncode != 0
    assert "ImgbuildBuildError: imgbuild build failed (exit 11): offline:" in cold.stderr, cold.stderr[-4000:]
    assert "is not in the cache mirror" in cold.stderr and "without --offline" in cold.stderr
    assert not any((head_cache / "mirrors").rglob("*.pack"))  # the head's mirror fetched nothing

    # online: built on the head, sparkrun's distribution finds the head up to date; nothing built here
    online = build()
    assert online.returncode == 0, online.stdout + online.stderr
    found = re.search(r"^Image:\s+(\S+)$", online.stdout, re.M)
    assert found, online.stdout
    pinned = found.group(1)
    assert re.fullmatch(rf"{re.escape(repo)}:[0-9][\w.]*-[0-9a-f]{{12,}}", pinned), pinned
    assert "Container image up-to-date on all 1 host(s)" in online.stderr  # the head has what it built
    there = node.client().images.get(pinned)
    assert engine.image(pinned) is None and engine.image(f"{repo}:latest") is None  # the control machine: none
    assert (
        there.labels["imgbuild.variant"] == "latest"
        and there.labels["imgbuild.inputs"].removeprefix("sha256:")[:12] in pinned
    )
    sent = tmp_path / "head-cache" / "imgbuild" / "sparkrun-projects"
    assert [p.name[:4] for p in sent.iterdir()] == ["dir-"]  # the project went over, as files

    # offline again: the head's cache has the release now; the same image, nothing rebuilt
    offline = build("--offline")
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert f"Image:     {pinned}" in offline.stdout
    assert "Offline: every image and model is present" in offline.stdout + offline.stderr
    again = last_json(driver(env, "--transfer-mode", "delegated", "--offline", str(path), head.host))
    assert again["head_image"] == pinned and again["content_images_by_node"] == [there.id]  # sparkrun's id check

    # the project as a git URL (`file://`, read by the head's own git) at `revision`: the head clones it into its cache
    # and builds that commit; a later commit whose series cannot apply is not what runs
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "project"], check=True)
    revision = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (project / "patches" / "series").write_text("0009-missing.patch\n")
    subprocess.run([*git, "commit", "-q", "-am", "broken"], check=True)
    data["builder_config"] |= {"project": f"file://{project}", "revision": revision}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    cloned = build()
    assert cloned.returncode == 0, cloned.stdout + cloned.stderr
    found = re.search(r"^Image:\s+(\S+)$", cloned.stdout, re.M)
    assert found, cloned.stdout
    built = node.client().images.get(found.group(1))
    assert built.labels["org.opencontainers.image.revision"] == revision  # the clone at the revision was built
    assert "org.opencontainers.image.revision" not in there.labels  # the files sent as a tar: no commit to name
    assert engine.image(found.group(1)) is None  # nothing built on the control machine
    clones = [p for p in sent.iterdir() if (p / ".git").is_dir()]
    assert len(clones) == 1, list(sent.iterdir())  # a clone beside the tar's directory
    head_rev = subprocess.run(["git", "-C", str(clones[0]), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert head_rev.stdout.strip() == revision


def test_offline_in_a_network_namespace_builds_from_the_cache_or_names_what_to_fetch(
    tmp_path: Path, make_project: MakeProject, prefix: str, engine: Engine, head: Sshd
) -> None:
    project = make_project("sroff")
    repo = f"{prefix}-sroff"
    env = sparkrun_env(tmp_path / "sparkrun", head, tmp_path / "cache")
    path = recipe(tmp_path / "recipe.yaml", project, repo)

    cold = driver(env, "--offline", "--prepare-only", str(path), head.host, netns=True)
    assert cold.returncode != 0 and "(exit 11): offline:" in cold.stderr, cold.stderr[-4000:]
    assert "is not in the cache mirror" in cold.stderr
    assert engine.image(f"{repo}:latest") is None

    online = last_json(driver(env, "--prepare-only", str(path), head.host))
    warm = last_json(driver(env, "--offline", "--prepare-only", str(path), head.host, netns=True))
    assert warm["head_image"] == online["head_image"] and engine.image(warm["head_image"]) is not None


def launchable(path: Path, models: Path) -> Path:
    """The recipe made launchable on the test node by `sparkrun run`: weights on the node (a local model directory
    with a config and an empty shard: sparkrun's preflight reads no more, and nothing goes to the Hub), a serve command
    that only waits (the synthetic image has no vLLM; sparkrun appends its own flags, which python3 ignores), and
    ulimits within this machine's hard limits: sparkrun asks for `memlock=-1` and `nofile=65535`, which runc cannot set
    in a container without CAP_SYS_RESOURCE (a Spark can; the recipe's `executor_config` is sparkrun's own override)."""
    (models / "dsv41").mkdir(parents=True, exist_ok=True)
    (models / "dsv41" / "config.json").write_text('{"model_type": "deepseek_v4"}')
    (models / "dsv41" / "model.safetensors").write_bytes(b"")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    data = yaml.safe_load(path.read_text())
    data["model"] = str(models / "dsv41")
    data["command"] = 'python3 -c "import time; time.sleep(600)"'
    data["executor_config"] = {"ulimit": [f"nofile={hard}:{hard}"]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def runtime_versions(stdout: str) -> dict[str, str]:
    """The "Runtime versions:" block `sparkrun run` prints (`  key:  value` lines up to a blank one)."""
    lines = stdout.split("Runtime versions:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


def test_a_published_variant_is_realized_by_digest_and_runs_showing_its_labels(
    tmp_path: Path, make_project: MakeProject, prefix: str, skeleton_base: str, node: Node, head: Sshd
) -> None:
    """`sparkrun export recipe --realize` and `sparkrun run`, sparkrun's own commands, on the node that the stand-in
    nvidia-smi and NVIDIA hook make a one-GB10 Spark (tests/support/node_daemon.py): placement finds its slot, the
    image is pinned by the digest the registry's tag named, and the launch (the node pulls that digest) prints the
    image's pins and patches from imgbuild's labels among its runtime versions."""
    project = make_project("srpub")
    repo = f"{prefix}-srpub"
    cache = tmp_path / "cache"
    built = run_cli(project, "build", "latest", "--base", "skeleton", "--json", env={"IMGBUILD_CACHE": str(cache)})
    assert built.returncode == 0, built.stderr
    image_id = json.loads(built.stdout)["images"][0]["image_id"]
    env = sparkrun_env(tmp_path / "sparkrun", head, cache)
    sparkrun = str(PYTHON.parent / "sparkrun")

    def realize(path: Path, out: Path) -> subprocess.CompletedProcess[str]:
        argv = [sparkrun, "export", "recipe", str(path), "--realize", "--hosts", head.host, "--save", str(out)]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=300)

    registry = RegistryProcess.start(tmp_path / "registry")
    there = f"{registry.host}/{repo}"
    try:
        published = launchable(recipe(tmp_path / "published.yaml", project, repo), tmp_path / "models")
        data = yaml.safe_load(published.read_text())
        data["builder_config"]["registry"] = registry.host
        published.write_text(yaml.safe_dump(data, sort_keys=False))
        realized = tmp_path / "realized.yaml"

        # not yet published: a local build, which sparkrun refuses to pin (placement passed: the error is the pin's)
        before = realize(published, realized)
        assert before.returncode != 0 and "runs a locally built image, which has no registry digest" in before.stderr
        assert "no free capacity" not in before.stderr

        subprocess.run(["docker", "tag", f"{repo}:latest", f"{there}:latest"], check=True)
        subprocess.run(["docker", "push", "-q", f"{there}:latest"], check=True, capture_output=True)
        done = realize(published, realized)
        assert done.returncode == 0, done.stderr[-4000:]
        assert f"pinned container: {repo}:latest -> {there}@{image_id}" in done.stderr  # the push kept the digest
        out = yaml.safe_load(realized.read_text())
        assert out["container"] == f"{there}@{image_id}"
        assert out["metadata"]["realized_for"] == {"nodes": 1, "platform": "DGX Spark", "accelerator": "nvidia/gb10"}

        # a launch of the source recipe: prepare() gives the published digest and builds nothing
        launched = last_json(driver(env, "--prepare-only", str(published), head.host))
        assert launched["head_image"] == f"{there}@{image_id}"

        # the tag moves on (another image pushed to it); the realized recipe still runs what it pinned
        subprocess.run(["docker", "tag", skeleton_base, f"{there}:latest"], check=True)
        subprocess.run(["docker", "push", "-q", f"{there}:latest"], check=True, capture_output=True)
        argv = [sparkrun, "run", str(realized), "--hosts", head.host, "--no-ready-wait", "--no-auto-detect"]
        run = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=600)
        assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
        running = node.client().containers.list()
        assert [c.image.id for c in running] == [image_id], running  # the node pulled the pinned digest
        hooked = node.hook_log.read_text().splitlines()  # `docker run --gpus`: dockerd ran the stand-in NVIDIA hook
        assert hooked and set(hooked) == {"prestart"}, hooked
        versions = runtime_versions(run.stdout)
        labels = node.client().images.get(image_id).labels
        assert versions["imgbuild_variant"] == "latest" and versions["imgbuild_inputs"] == labels["imgbuild.inputs"]
        assert versions["imgbuild_upstream"] == f"v1.0.0 {labels['imgbuild.upstream.commit'][:12]}"
        assert versions["imgbuild_patches"] == "0001-attn applied, 0002-sparse applied, 0003-engram applied"
        assert re.fullmatch(r"3\.\d+\.\d+", versions["python"]), versions  # the runtime's own command, in the container
        assert not any(k.startswith("container_") for k in versions)  # not every label flattened (imgbuild.files)

        # the same recipe without a registry: the plugin's pull_ref is None, and sparkrun says why
        plain = yaml.safe_load(published.read_text())
        del plain["builder_config"]["registry"]
        published.write_text(yaml.safe_dump(plain, sort_keys=False))
        refused = realize(published, tmp_path / "plain.yaml")
        assert refused.returncode != 0 and "has no registry digest" in refused.stderr
    finally:
        for container in node.client().containers.list(all=True):
            container.remove(force=True)
        registry.stop()
        subprocess.run(["docker", "rmi", f"{there}:latest"], capture_output=True, check=False)
