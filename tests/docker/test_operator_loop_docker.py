"""The operator's loop on two platforms against a real registry (Debian's docker-registry on loopback), on the
skeleton stand-in: a stopped registry stops publish before any build; build, recipe, publish both platforms,
publish one platform again (the moving tag keeps the other), recipe, history, rollback; a registry killed mid-way
leaves the local and the registry's moving tags as they were. After each step `docker buildx imagetools inspect`
(through `tools.inspect`, the same docker tool, read back independently of what publish printed) checks the
registry, and `docker image inspect` the local store.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from imgbuild.registry import tools
from tests.support.jsonschema_check import load_json
from tests.support.registry_env import REPO_ROOT, START, RegistryProcess, free_port, remove_images, set_platforms
from tests.support.runner import imgbuild
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release

pytestmark = pytest.mark.docker
BOTH = ["linux/amd64", "linux/arm64"]


@dataclass
class Loop:
    registry: RegistryProcess
    project: Path
    repo: str
    cache: Path
    out: Path

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return imgbuild(self.project, *args, env={"IMGBUILD_CACHE": str(self.cache), **(env or {})})

    def ok(self, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
        proc = self.run(*args, "--json", env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        doc: dict[str, object] = load_json(proc.stdout)
        return doc

    @property
    def remote(self) -> str:
        return f"{self.registry.host}/{self.repo}"

    def relabel(self, value: str) -> None:
        """A new input for engram-mem (a label of its own): its next build is a new image on every platform."""
        path = self.project / "images" / "engram-mem.yaml"
        data = yaml.safe_load(path.read_text())
        data.setdefault("image", {}).setdefault("labels", {})["loop"] = value
        path.write_text(yaml.safe_dump(data))


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Iterator[Loop]:
    root = tmp_path_factory.mktemp("loop")
    registry = RegistryProcess.start(root / "registry")
    try:
        upstream = Upstream(root / "upstream")
        release(upstream)
        repo = f"{prefix}-loop"
        project = engram_project(root / "project", upstream, repo)
        set_platforms(project, ["linux/arm64", "linux/amd64"])
        (project / "deploy").mkdir(exist_ok=True)
        shutil.copy(REPO_ROOT / "deploy" / "profiles.yaml", project / "deploy" / "profiles.yaml")
        yield Loop(registry, project, repo, root / "cache", root / "out")
    finally:
        registry.stop()
        remove_images(registry.host + "/")


def local_id(ref: str) -> str | None:
    done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def registry_platforms(ref: str) -> tuple[str, dict[str, str]] | None:
    found = tools.inspect(ref)
    return None if found is None else (found.digest, tools.platforms_at(found))


def test_a_stopped_registry_stops_publish_before_anything_is_built_or_tagged(loop: Loop) -> None:
    gone = f"127.0.0.1:{free_port()}"
    before = {t: local_id(f"{loop.repo}:{t}") for t in ("latest", "engram-mem")}
    proc = loop.run("publish", "engram-mem", "-r", gone, "--base", "skeleton")
    assert proc.returncode == 9, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = " ".join(proc.stderr.split())
    assert f"cannot publish to {gone}" in err and f"is the registry at {gone} running" in err, err
    assert "building" not in proc.stderr and "smoke-testing" not in proc.stderr, proc.stderr
    assert {t: local_id(f"{loop.repo}:{t}") for t in ("latest", "engram-mem")} == before


def test_the_operator_loop_on_two_platforms(loop: Loop) -> None:
    remote = loop.remote
    # build both platforms, then recipe: the join's immutable tag is its identity
    built = loop.ok("build", "engram-mem", "--platform", "all", "--base", "skeleton")
    (first_join,) = {str(i["index_ref"]) for i in built["images"]}  # type: ignore[attr-defined]
    recipe = loop.ok("recipe", "engram-mem", "--profile", "TP8-300K", "--out", str(loop.out))
    assert recipe["image"] == first_join and recipe["image_id"] == local_id(f"{loop.repo}:engram-mem")
    # the join named by its own immutable tag is accepted too
    named = loop.ok("recipe", "engram-mem", "--profile", "TP8-300K", "--image", first_join, "--out", str(loop.out))
    assert named["image"] == first_join

    # publish both platforms: the registry's moving tag is the local join, an index of both
    pub = loop.ok("publish", "engram-mem", "-r", loop.registry.host, "--base", "skeleton")
    (v,) = pub["variants"]  # type: ignore[misc]
    join_digest = local_id(first_join)
    assert v["digest"] == join_digest
    both = registry_platforms(f"{remote}:engram-mem")
    assert both is not None and both[0] == join_digest and sorted(both[1]) == BOTH
    assert registry_platforms(f"{remote}:{first_join.rsplit(':', 1)[1]}") == both
    again = loop.ok("recipe", "engram-mem", "--profile", "TP8-300K", "--out", str(loop.out))
    assert again["image"] == first_join
    pinned = loop.ok("recipe", "engram-mem", "--profile", "TP8-300K", "--registry", loop.registry.host,
                     "--out", str(loop.out))  # fmt: skip
    assert pinned["image"] == f"{remote}@{join_digest}"

    # a new arm64 build published alone: the dry run shows the index before and after, amd64 kept
    loop.relabel("2")
    dry = loop.ok("publish", "engram-mem", "-r", loop.registry.host, "--platform", "linux/arm64", "--base",
                  "skeleton", "--dry-run")  # fmt: skip
    (moving,) = dry["variants"][0]["moving_index"]  # type: ignore[index]
    assert moving["ref"] == f"{remote}:engram-mem" and moving["before"] == both[1]
    assert moving["kept"] == ["linux/amd64"] and moving["after"]["linux/amd64"] == both[1]["linux/amd64"]
    one = loop.ok("publish", "engram-mem", "-r", loop.registry.host, "--platform", "linux/arm64", "--base", "skeleton")
    (v,) = one["variants"]  # type: ignore[misc]
    new_arm = v["platforms"]["linux/arm64"]["manifest"]
    assert new_arm != both[1]["linux/arm64"] and v["kept"] == ["linux/amd64"] and v["moved"] == ["engram-mem"]
    after = registry_platforms(f"{remote}:engram-mem")
    assert after is not None and after[1] == {"linux/amd64": both[1]["linux/amd64"], "linux/arm64": new_arm}
    assert after[0] == v["digest"]
    # the same again writes nothing: the index already has it
    mark = loop.registry.log_mark()
    same = loop.ok("publish", "engram-mem", "-r", loop.registry.host, "--platform", "linux/arm64", "--base",
                   "skeleton")  # fmt: skip
    assert same["variants"][0]["state"] == "unchanged"  # type: ignore[index]
    assert not [r for r in loop.registry.requests_since(mark) if r[0] in ("PUT", "POST", "PATCH", "DELETE")]
    assert registry_platforms(f"{remote}:engram-mem") == after

    # history lists the join; rollback puts the moving tags back on it, locally and in the registry
    hist = loop.ok("history", "engram-mem", "--registry", loop.registry.host)
    joins = [e for e in hist["entries"] if e["kind"] == "join"]  # type: ignore[attr-defined]
    assert [e["ref"] for e in joins] == [first_join]
    # the registry's moving tag is an index no local build is: history names the build of each of its platforms
    by_id = {e["image_id"]: e["ref"] for e in hist["entries"]}  # type: ignore[attr-defined]
    held = hist["registry"]["platforms"][f"{remote}:engram-mem"]  # type: ignore[index]
    assert held == {p: by_id[d] for p, d in after[1].items()}, held
    assert all(ref.startswith(f"{loop.repo}:") for ref in held.values()), held
    text = loop.run("history", "engram-mem", "--registry", loop.registry.host)
    assert f"an index of linux/amd64 {held['linux/amd64']}, linux/arm64 {held['linux/arm64']}" in text.stdout
    back = loop.run("rollback", "engram-mem", "--to", first_join, "--no-smoke", "--registry", loop.registry.host)
    assert back.returncode == 0, back.stdout[-2000:] + back.stderr[-2000:]
    assert local_id(f"{loop.repo}:engram-mem") == join_digest
    assert registry_platforms(f"{remote}:engram-mem") == both

    # the registry killed at the first push: both stores' moving tags as they were
    loop.relabel("3")
    local_before = local_id(f"{loop.repo}:engram-mem")
    wrapper = loop.out / "docker-kills-registry"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = push ]; then kill -9 {loop.registry.pid}; sleep 0.5; fi\n'
        f'exec {shutil.which("docker")} "$@"\n'
    )
    wrapper.chmod(0o755)
    proc = loop.run("publish", "engram-mem", "-r", loop.registry.host, "--base", "skeleton",
                    env={"IMGBUILD_DOCKER": str(wrapper)})  # fmt: skip
    assert proc.returncode == 9, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "pushing" in proc.stderr  # it got as far as the registry
    assert local_id(f"{loop.repo}:engram-mem") == local_before
    restarted = subprocess.run(["bash", str(START), str(loop.registry.port), str(loop.registry.dir)],
                               capture_output=True, text=True, check=True)  # fmt: skip
    loop.registry.pid = int(restarted.stdout.strip().splitlines()[-1])
    assert registry_platforms(f"{remote}:engram-mem") == both
