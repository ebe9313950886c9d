"""The registry fails during `publish`: a 5xx, a connection closed, the registry killed. The publish fails naming
the push; no tag in the registry names a manifest or blob it does not hold; the next publish completes without
uploading a blob twice, and one more changes nothing.

The faults come from a proxy in front of a real docker-registry (tests/support/fault_proxy.py); the project's
engram-mem variant is built once on the skeleton, so each test is only the publish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.fault_proxy import Fault, FaultProxy
from tests.support.jsonschema_check import load_json
from tests.support.registry_env import ACCEPT, START, RegistryProcess, docker, remove_images, uploads
from tests.support.runner import imgbuild

pytestmark = pytest.mark.faults


@dataclass
class Stage:
    registry: RegistryProcess
    proxy: FaultProxy
    project: Path
    cache: Path
    prefix: str  # local repositories (--repository names them locally too) under the session's, which it removes

    def args(self, repository: str) -> tuple[str, ...]:
        return ("publish", "engram-mem", "-r", self.proxy.host, "--repository", repository, "--base", "skeleton")

    def publish(self, repository: str) -> subprocess.CompletedProcess[str]:
        return imgbuild(self.project, *self.args(repository), "--json", env={"IMGBUILD_CACHE": str(self.cache)})

    def restart_registry(self) -> None:
        """Start it again on its port and storage (after a "kill" fault)."""
        done = subprocess.run(
            ["bash", str(START), str(self.registry.port), str(self.registry.dir)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        self.registry.pid = int(done.stdout.strip().splitlines()[-1])

    # -- what the registry holds, asked directly (not through the proxy) ---------------------------------
    def _get(self, path: str, method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(f"http://{self.registry.host}{path}", method=method, headers={"Accept": ACCEPT})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, b"", {}

    def tags(self, repository: str) -> dict[str, str]:
        """Each tag of `repository` -> the digest of the manifest it names."""
        status, body, _ = self._get(f"/v2/{repository}/tags/list")
        if status == 404:
            return {}
        out = {}
        for tag in json.loads(body).get("tags") or []:
            status, _, headers = self._get(f"/v2/{repository}/manifests/{tag}", "HEAD")
            assert status == 200, (tag, status)
            out[tag] = headers["Docker-Content-Digest"]
        return out

    def missing(self, repository: str) -> list[str]:
        """Everything a tag of `repository` names (manifests, configs, layers) that the registry cannot serve."""
        missing = []
        todo = list(self.tags(repository).values())
        while todo:
            digest = todo.pop()
            status, body, _ = self._get(f"/v2/{repository}/manifests/{digest}")
            if status != 200:
                missing.append(digest)
                continue
            doc = json.loads(body)
            todo += [m["digest"] for m in doc.get("manifests") or []]
            for blob in [doc.get("config") or {}, *(doc.get("layers") or [])]:
                if blob and self._get(f"/v2/{repository}/blobs/{blob['digest']}", "HEAD")[0] != 200:
                    missing.append(blob["digest"])
        return missing


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory, prefix: str, skeleton_base: str) -> Iterator[Stage]:  # noqa: ARG001
    root = tmp_path_factory.mktemp("regfault")
    registry = RegistryProcess.start(root / "registry")
    proxy = FaultProxy(registry.port, lambda: registry.pid).start()
    try:
        from tests.support.synth import Upstream
        from tests.support.synth_images import engram_project, release

        upstream = Upstream(root / "upstream")
        release(upstream)
        project = engram_project(root / "project", upstream, f"{prefix}-regfault")
        stage = Stage(registry, proxy, project, root / "cache", prefix)
        done = imgbuild(project, "build", "engram-mem", "--base", "skeleton", env={"IMGBUILD_CACHE": str(stage.cache)})
        assert done.returncode == 0, done.stderr
        yield stage
    finally:
        proxy.stop()
        registry.stop()
        remove_images(proxy.host + "/")


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (variant,) = load_json(done.stdout)["variants"]
    return dict(variant)


def local_id(ref: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()


def converges(stage: Stage, repository: str, *, moved_only: bool = False, blobs_again: bool = True) -> None:
    """The next publish completes (uploading no blob the registry has) and the one after changes nothing."""
    mark = stage.registry.log_mark()
    again = outcome(stage.publish(repository))
    written = uploads(stage.registry.requests_since(mark))
    blobs = [r for r in written if "/blobs/" in r[1]]
    if moved_only:
        assert again["state"] == "retagged" and again["pushed"] == [], again
    if moved_only or not blobs_again:
        assert blobs == [], written  # nothing uploaded twice: only manifests
    tags = stage.tags(repository)
    immutable = str(again["immutable"]).rsplit(":", 1)[1]
    assert tags == {immutable: again["digest"], "engram-mem": again["digest"]}, tags
    assert stage.missing(repository) == []
    (plat,) = dict(again["platforms"]).values()  # type: ignore[call-overload]
    assert again["digest"] == plat["manifest"] == local_id(plat["local"])  # the local image, digest for digest
    mark = stage.registry.log_mark()
    third = outcome(stage.publish(repository))
    assert third["state"] == "unchanged" and uploads(stage.registry.requests_since(mark)) == []


def test_a_5xx_on_the_moving_tag_leaves_it_unmoved_and_the_rerun_only_moves_it(stage: Stage) -> None:
    repo = f"{stage.prefix}-five"
    stage.proxy.faults = [Fault("PUT", r"/manifests/engram-mem$", "503")]
    done = stage.publish(repo)
    assert done.returncode == 9, done.stdout[-2000:] + done.stderr[-2000:]
    err = " ".join(done.stderr.split())
    assert f"docker push {stage.proxy.host}/{repo}:engram-mem failed" in err, err
    assert "503" in err and "server error (5xx): once it is well, run the command again" in err, err
    tags = stage.tags(repo)
    assert "engram-mem" not in tags and len(tags) == 1, tags  # the immutable tag only
    assert stage.missing(repo) == []
    stage.proxy.faults = []
    converges(stage, repo, moved_only=True)


def test_a_connection_closed_at_the_first_upload_fails_the_push_and_the_rerun_completes(stage: Stage) -> None:
    """docker does not retry a connection the registry closes on a blob upload: the publish fails, saying so."""
    repo = f"{stage.prefix}-closed"
    stage.proxy.faults = [Fault("*", r"/blobs/uploads/", "close")]
    done = stage.publish(repo)
    stage.proxy.faults = []
    assert done.returncode == 9, done.stdout[-2000:] + done.stderr[-2000:]
    err = " ".join(done.stderr.split())
    assert f"docker push {stage.proxy.host}/{repo}:1.0.0-" in err, err
    assert "was closed mid-request: run the command again" in err, err
    assert stage.tags(repo) == {}
    converges(stage, repo)


def test_the_registry_killed_before_the_manifest_leaves_no_tag_and_the_rerun_uploads_no_blob(stage: Stage) -> None:
    repo = f"{stage.prefix}-killed"
    stage.proxy.faults = [Fault("PUT", r"/manifests/", "kill", times=1)]  # every blob is in; then it dies
    try:
        done = stage.publish(repo)
        assert done.returncode == 9, done.stdout[-2000:] + done.stderr[-2000:]
        err = " ".join(done.stderr.split())
        assert f"docker push {stage.proxy.host}/{repo}:1.0.0-" in err, err
        assert "closed mid-request" in err or "is the registry at" in err, err
    finally:
        stage.proxy.faults = []
        stage.restart_registry()
    assert stage.tags(repo) == {}  # no tag: nothing names what the registry may lack
    converges(stage, repo, blobs_again=False)  # its blobs were in before it died: none is uploaded again
    mark_free = [r for r in stage.proxy.seen if "/blobs/uploads/" in r[1] and r[0] in ("PUT", "PATCH")]
    assert mark_free  # the first run uploaded them


@pytest.mark.parametrize(
    ("point", "method", "path"),
    [
        ("the first blob upload", "POST", r"/blobs/uploads/"),
        ("the immutable tag's manifest", "PUT", r"/manifests/1\.0\.0-"),
        ("the moving tag's manifest", "PUT", r"/manifests/engram-mem$"),
    ],
)
def test_publish_killed_between_pushes_leaves_tags_whole_and_the_rerun_converges(
    stage: Stage, point: str, method: str, path: str
) -> None:
    """SIGKILL of imgbuild when its push reaches `point` (its `docker push` child goes on, as it would): each
    tag the registry has names the local image and all of it; a moving tag never without the immutable one."""
    repo = f"{stage.prefix}-killed-at-{len(point)}-{method.lower()}"  # a repository per point
    env = {**os.environ, "IMGBUILD_CACHE": str(stage.cache)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "imgbuild", "-C", str(stage.project), *stage.args(repo)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    stage.proxy.faults = [Fault(method, path, "call", times=1, call=lambda: os.kill(proc.pid, signal.SIGKILL))]
    try:
        proc.wait(timeout=600)
    finally:
        stage.proxy.faults = []
    assert proc.returncode == -signal.SIGKILL, f"{point}: it ended before the kill ({proc.returncode})"
    time.sleep(2)  # the orphaned `docker push` finishes what it was sending
    tags = stage.tags(repo)
    assert stage.missing(repo) == [], point
    assert "engram-mem" not in tags or len(tags) == 2, (point, tags)  # moving only after the immutable one
    assert len(set(tags.values())) <= 1, (point, tags)
    converges(stage, repo)
