"""Every --json document a command prints without docker, on a synthetic project: each validated against
its committed schema (docs/schema/) by name, success and failure. The docker tier validates the rest
(build, smoke, skeleton, publish, recipe) where its tests read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.platforms import Platform
from imgbuild.registry import lock as lockmod
from tests.support.jsonschema_check import load_json
from tests.support.runner import imgbuild_here as imgbuild  # in-process: the documents, not the process
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release

NO_DAEMON = "unix:///nonexistent/docker.sock"
BASE = "registry.example/vllm/vllm-openai:v1.0.0"


@pytest.fixture
def root(tmp_path: Path, upstream: Upstream) -> Path:
    release(upstream)
    return engram_project(tmp_path / "p", upstream, "vllm-dsv41", base=BASE)


def doc(root: Path, name: str, *args: str, code: int = 0) -> dict[str, object]:
    done = imgbuild(root, *args, "--json", DOCKER_HOST=NO_DAEMON)
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    found: dict[str, object] = load_json(done.stdout, expect=name)
    return found


def test_the_patch_author_documents(root: Path, tmp_path: Path) -> None:
    assert doc(root, "plan", "plan")["variants"]
    listed = doc(root, "patches-list", "patches", "list")["patches"]
    assert isinstance(listed, list) and all(str(p["patch"]).endswith(".patch") for p in listed)
    assert doc(root, "patches-status", "patches", "status")["rebase"] is None
    assert doc(root, "patches-check", "patches", "check")["ok"] is True
    assert doc(root, "patches-apply", "patches", "apply", "--into", str(tmp_path / "tree"))["files"]
    assert doc(root, "patches-rebase-status", "patches", "rebase") == {
        "schema": "imgbuild.patches-rebase-status/1",
        "in_progress": False,
        "rebase": None,
    }
    assert doc(root, "patches-edit", "patches", "edit")["created"] is True
    refreshed = doc(root, "patches-refresh", "patches", "refresh", "--close")
    assert refreshed["closed"] is True and refreshed["written"] == []
    assert doc(root, "patches-edit", "patches", "edit")["created"] is True
    assert doc(root, "patches-edit-discard", "patches", "edit", "--discard")["ok"] is True
    # failures: the error document (here: no rebase to abort, an unknown variant, a usage error)
    error = doc(root, "error", "patches", "rebase", "--abort", code=10)["error"]
    assert isinstance(error, dict) and error["exit_code"] == 10 and error["type"] == "StateError"
    assert doc(root, "error", "plan", "no-such-variant", code=2)["error"]  # a bad command line: exit 2
    assert doc(root, "error", "plan", "--bogus", code=2)["error"]


def test_the_lock_and_bake_documents(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = doc(root, "lock-check", "lock", "--check", "--offline", code=1)
    assert stale["ok"] is False and stale["problems"]
    baked = doc(root, "bake", "bake")
    assert baked["changed"] is True and baked["targets"]
    assert doc(root, "bake-check", "bake", "--check") == {"schema": "imgbuild.bake-check/1", "ok": True, "problems": []}
    # images.lock as `lock` writes it, from a resolver that asks no registry
    platforms = (
        (Platform.parse("linux/amd64"), "sha256:" + "3" * 64),
        (Platform.parse("linux/arm64"), "sha256:" + "2" * 64),
    )
    base = lockmod.LockedBase(BASE, "sha256:" + "1" * 64, "application/vnd.oci.image.index.v1+json", platforms)
    make_lock = lockmod.make_lock
    monkeypatch.setattr(
        lockmod, "make_lock", lambda *args, **kw: make_lock(*args, **{**kw, "resolve": lambda _ref: base})
    )
    written = doc(root, "lock", "lock")
    assert written["changed"] is True and isinstance(written["lock"], dict) and BASE in written["lock"]["bases"]
    assert doc(root, "lock-check", "lock", "--check", "--offline")["ok"] is True


def test_what_skeleton_makes_is_its_documents_shape() -> None:
    """`skeleton [--runtime] --json` renders builder/standin.py's results as they are (the runtime base is built
    only in the docker tier's opt-in and slow tests)."""
    from dataclasses import asdict

    from imgbuild.builder.standin import LockedUpstream, RuntimeMade, SkeletonMade, Upstream
    from imgbuild.report.documents.images import SKELETON, SKELETON_RUNTIME

    pin = Upstream("vllm", "v1.0.0", "c" * 40, "vllm")
    made = SkeletonMade("imgbuild/skeleton:x", "sha256:1", "linux/arm64", "/site", "c" * 40, (pin,), "/cache/rootfs")
    assert load_json(SKELETON.of(made).render(), expect="skeleton")["upstreams"][0]["name"] == "vllm"
    locked = LockedUpstream(**asdict(pin), locked="1.0.0")
    runtime = RuntimeMade(
        "imgbuild/runtime:x", "sha256:2", "linux/amd64", "/site", "images/runtime-lock/x.txt", "d", 3, (locked,),
        True, 10, 1.5,
    )  # fmt: skip
    assert load_json(SKELETON_RUNTIME.of(runtime).render(), expect="skeleton-runtime")["wheels"] == 3
