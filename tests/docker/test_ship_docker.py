"""`imgbuild ship` to a second dockerd standing for a node (tests/support/node_daemon.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from imgbuild.images.docker import Engine
from tests.docker.conftest import Built
from tests.support.node_daemon import DOCKERD26, Node, node_daemon
from tests.support.sshd import SSHD, sshd_to
from tests.support.tcpproxy import Proxy

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with node_daemon(tmp_path_factory.mktemp("node1"), f"br14n{os.getpid() % 10000}") as n:
        yield n


def ship(built: Built, *args: str) -> tuple[int, dict[str, object], str]:
    proc = built.cli("ship", *args, "--json")
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}, proc.stderr


def on_node(node: Node, ref: str) -> dict[str, object] | None:
    try:
        attrs: dict[str, object] = node.client().api.inspect_image(ref)
    except Exception:  # noqa: BLE001 - NotFound, for any name
        return None
    return attrs


# The archive path (`docker save` filtered to the layers a node lacks) is the classic-store host's;
# a containerd-store host sends every node through the loopback registry (the test after these).
def archive_path(engine: Engine) -> None:
    if engine.features.containerd_store:
        pytest.skip("this host uses the containerd image store: every node pulls from the loopback registry")


def test_ship_to_a_node(built: Built, node: Node, engine: Engine) -> None:
    archive_path(engine)
    latest = engine.require(f"{built.repo}:latest")
    mem = engine.require(f"{built.repo}:engram-mem")

    # 1. an interrupted transfer: the node ends up with no image, under the tag or otherwise
    with Proxy(node.tcp_port, cut_after=2_000_000) as proxy:
        code, data, _ = ship(built, "latest", "--to", f"tcp://{proxy.host}", "--with-base")
    assert code == 7 and proxy.cut, data
    result = data["nodes"][0]  # type: ignore[index]
    assert not result["ok"] and "docker load failed" in result["error"]
    assert on_node(node, latest.id) is None and on_node(node, f"{built.repo}:latest") is None

    # 2. the base is not there: refused with the reason, nothing sent
    code, data, _ = ship(built, "latest", "--to", node.socket)
    result = data["nodes"][0]  # type: ignore[index]
    assert code == 7 and "lacks the base" in result["error"] and "--with-base" in result["hint"]
    assert result["bytes_sent"] == 0 and on_node(node, latest.id) is None

    # 3. --with-base: everything goes; the same image id, labels checked, then the tags
    code, data, _ = ship(built, "latest", "--to", node.socket, "--with-base")
    assert code == 0, data
    result = data["nodes"][0]  # type: ignore[index]
    assert result["status"] == "shipped" and result["layers_held"] == 0
    assert result["bytes_sent"] > 0.9 * data["full_size"]  # type: ignore[operator]
    there = on_node(node, f"{built.repo}:latest")
    assert there is not None and there["Id"] == latest.id
    assert there["Config"]["Labels"] == latest.labels  # type: ignore[index]
    assert sorted(there["RepoTags"]) == sorted(t for t in latest.tags if t.startswith(built.repo))  # type: ignore[arg-type]

    # 4. the other variant: the node has every layer of it (latest = engram-mem's layers + one); only config goes
    code, data, _ = ship(built, "engram-mem", "--to", node.socket)
    assert code == 0, data
    result = data["nodes"][0]  # type: ignore[index]
    assert result["layers_sent"] == 0 and result["layers_held"] == len(mem.layers)
    assert result["bytes_sent"] < 100_000 < data["full_size"]  # type: ignore[operator]
    there = on_node(node, f"{built.repo}:engram-mem")
    assert there is not None and there["Id"] == mem.id

    # 5. again: the image is there, only tags move
    code, data, _ = ship(built, "engram-mem", "--to", node.socket)
    assert code == 0 and data["nodes"][0]["status"] == "present" and data["nodes"][0]["bytes_sent"] == 0  # type: ignore[index]


def test_dead_node_is_named_and_the_others_finish(built: Built, node: Node, tmp_path: Path) -> None:
    dead = f"unix://{tmp_path / 'nobody.sock'}"
    code, data, _ = ship(built, "engram-mem", "--to", dead, "--to", node.socket, "--with-base")
    assert code == 7
    by_node = {r["node"]: r for r in data["nodes"]}  # type: ignore[union-attr]
    assert not by_node[dead]["ok"] and "cannot reach" in by_node[dead]["error"] and dead in by_node[dead]["error"]
    assert by_node[node.socket]["ok"]
    proc = built.cli("ship", "engram-mem", "--to", dead)
    assert proc.returncode == 7 and f"shipping failed on 1 of 1 node(s): {dead}" in proc.stderr


@pytest.mark.skipif(not Path(DOCKERD26).exists(), reason=f"no dockerd 26 at {DOCKERD26} (IMGBUILD_DOCKERD26)")
@pytest.mark.parametrize("node_store", ["containerd", "classic"])
def test_registry_path_to_a_node(built: Built, engine: Engine, tmp_path: Path, node_store: str) -> None:
    """Measured: a containerd-store daemon's `docker load` refuses an archive without layers
    ("failed to resolve layers: layer .../layer.tar not found"); such a node pulls from a short-lived
    loopback registry instead, which sends only the blobs it lacks. So does every node of a host that
    itself keeps images in containerd (its ids are manifest digests, a classic node's config digests)."""
    here_containerd = engine.features.containerd_store
    if node_store == "classic" and not here_containerd:
        pytest.skip("a classic-store host ships classic nodes through the archive path (test_ship_to_a_node)")
    latest = engine.require(f"{built.repo}:latest")
    mem = engine.require(f"{built.repo}:engram-mem")
    root, bridge = tmp_path / "n26", f"br14{node_store[:2]}{os.getpid() % 10000}"
    with node_daemon(root, bridge, containerd_store=node_store == "containerd") as c26:
        code, data, _ = ship(built, "latest", "--to", c26.socket)
        assert code == 7 and "lacks the base" in data["nodes"][0]["error"]  # type: ignore[index]
        code, data, _ = ship(built, "latest", "--to", c26.socket, "--with-base")
        assert code == 0, data
        first = data["nodes"][0]  # type: ignore[index]
        assert "loopback registry" in first["note"] and first["bytes_sent"] > 1_000_000
        code, data, _ = ship(built, "engram-mem", "--to", c26.socket)
        assert code == 0, data
        second = data["nodes"][0]  # type: ignore[index]
        assert second["status"] == "shipped" and second["bytes_sent"] < 100_000
        for info, result in ((latest, first), (mem, second)):
            there = on_node(c26, f"{built.repo}:{info.labels['imgbuild.variant']}")
            assert there is not None and there["Id"] == result["image_id"]
            assert there["RootFS"]["Layers"] == list(info.layers)  # type: ignore[index]
            assert there["Config"]["Labels"] == info.labels  # type: ignore[index]
        names = [t for img in c26.client().images.list() for t in img.tags]
        assert not any("imgbuild-ship" in t for t in names)  # the registry's name is gone again
        code, data, _ = ship(built, "engram-mem", "--to", c26.socket)
        assert code == 0 and data["nodes"][0]["status"] == "present"  # type: ignore[index]


def test_ship_over_ssh(built: Built, node: Node, engine: Engine, tmp_path: Path) -> None:
    """docker's ssh transport as the docker CLI does it: `ssh ... docker system dial-stdio`, to an sshd on loopback.
    On a containerd-store host the node pulls through `ssh -R` from the loopback registry."""
    assert Path(SSHD).exists(), f"{SSHD} is missing: run `bash .ci/setup-sshd.sh`"
    mem = engine.require(f"{built.repo}:engram-mem")
    ref = f"{built.repo}:engram-mem"
    for variant in ("latest", "engram-mem"):
        code, data, _ = ship(built, variant, "--to", node.socket, "--with-base")
        assert code == 0, data
    there = on_node(node, ref)
    assert there is not None
    node.client().api.remove_image(there["Id"], force=True)  # the node keeps latest, so only the config must go
    with sshd_to(tmp_path / "sshd", node.socket) as sshd:
        env = {"IMGBUILD_SSH": str(sshd.ssh)}
        proc = built.cli("ship", "engram-mem", "--to", sshd.url, "--json", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads(proc.stdout)["nodes"][0]
        assert result["node"] == sshd.url and result["status"] == "shipped" and 0 < result["bytes_sent"] < 100_000
        there = on_node(node, ref)
        assert there is not None and there["Id"] == result["image_id"]
        assert there["RootFS"]["Layers"] == list(mem.layers) and there["Config"]["Labels"] == mem.labels  # type: ignore[index]
        if not engine.features.containerd_store:
            assert there["Id"] == mem.id  # the archive path keeps the image id itself
        dead = sshd.url.rsplit(":", 1)[0] + ":1"  # nothing listens on port 1
        proc = built.cli("ship", "engram-mem", "--to", dead, "--json", env=env)
        assert proc.returncode == 7 and dead in json.loads(proc.stdout)["nodes"][0]["error"]
