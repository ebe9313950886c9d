"""`imgbuild recipe` against the real launchers: sparkrun's own loader, `docker compose config`,
and a compose `up` of engram-mem under qemu with the limits checked from inside the container."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from imgbuild.engine import Engine
from tests.docker.conftest import Built
from tests.support.jsonschema_check import load_json

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
SPARKRUN_PYTHON = os.environ.get("IMGBUILD_SPARKRUN_PYTHON", "/opt/imgbuild-sparkrun/bin/python")
MULTI = {"--nnodes", "--master-addr", "--master-port", "--node-rank"}

# Runs inside the container (python3-minimal: no `resource` or `json`, so /proc is read and repr printed).
CHECK = """
import os
limits = {}
for line in open('/proc/self/limits').read().splitlines()[1:]:
    name, soft, hard = line[:26].strip(), line[26:47].strip(), line[47:68].strip()
    limits[name] = [soft, hard]
caps = {k: v.strip() for k, v in (l.split(':', 1) for l in open('/proc/self/status') if l.startswith('Cap'))}
mem = None
for p in ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'):
    if os.path.exists(p):
        mem = open(p).read().strip()
        break
print(repr({'limits': limits, 'cap_eff': caps['CapEff'], 'memory': mem, 'machine': os.uname().machine,
                  'env': dict(os.environ)}))
"""


@pytest.fixture(scope="module")
def written(built: Built, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    (built.project / "deploy").mkdir(exist_ok=True)
    shutil.copy(ROOT / "deploy" / "profiles.yaml", built.project / "deploy" / "profiles.yaml")
    out = tmp_path_factory.mktemp("recipes")
    proc = built.cli("recipe", "engram-mem", "--profile", "TP8-300K", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = load_json(proc.stdout)
    return data


def compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "compose", *args], capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )


def flags(argv: list[str]) -> tuple[list[str], dict[str, str | None]]:
    """(positionals, {flag: value or None}) of a `vllm serve` command line."""
    pos: list[str] = []
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        if argv[i].startswith("-"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.startswith("-"):
                out[argv[i]] = None
                i += 1
            else:
                out[argv[i]] = nxt
                i += 2
        else:
            pos.append(argv[i])
            i += 1
    return pos, out


def test_recipe_pins_the_immutable_tag_of_the_local_image(
    written: dict[str, Any], built: Built, engine: Engine
) -> None:
    image = engine.require(f"{built.repo}:engram-mem")
    immutable = [t for t in image.tags if t != f"{built.repo}:engram-mem" and t.startswith(f"{built.repo}:")]
    assert len(immutable) == 1 and re.search(r":[^:]+-[0-9a-f]{12}$", immutable[0])
    assert written["image"] == immutable[0] and written["image_id"] == image.id
    assert engine.require(written["image"]).id == image.id
    assert written["found"] == f"local {built.repo}:engram-mem" and written["platform"] == "linux/arm64"
    recipe = yaml.safe_load(Path(written["recipe"]).read_text())
    services = yaml.safe_load(Path(written["compose"]).read_text())["services"]
    # a repository reference sparkrun's distribution can tag on a node, and not the tag the next build moves
    assert recipe["container"] == immutable[0]
    assert {s["image"] for s in services.values()} == {immutable[0]}
    # an id given with --image is resolved to the same tag: a bare id is never written
    again = built.cli("recipe", "engram-mem", "--profile", "TP8-300K", "--image", image.id, "--json", "--out",
                      str(Path(written["recipe"]).parent / "by-id"))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert load_json(again.stdout)["image"] == immutable[0]


def test_sparkrun_loader_reads_the_same_image_env_and_serve_args(written: dict[str, Any]) -> None:
    assert Path(SPARKRUN_PYTHON).exists(), f"{SPARKRUN_PYTHON} is missing: run `bash .ci/setup-sparkrun.sh`"
    proc = subprocess.run(
        [SPARKRUN_PYTHON, str(ROOT / "tests" / "support" / "sparkrun_check.py"), written["recipe"]],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    service = yaml.safe_load(Path(written["compose"]).read_text())["services"]
    assert seen["runtime"] == "vllm-distributed" and seen["issues"] == []
    assert seen["container"] == written["image"] == service["head"]["image"]
    assert seen["env"] == written["recipe_env"] != written["env"] == service["head"]["environment"]
    assert written["left_to_sparkrun"] == ["NCCL_CROSS_NIC", "NCCL_IB_MERGE_NICS", "NCCL_IGNORE_CPU_AFFINITY"]
    assert seen["env"]["VLLM_FLASHINFER_AUTOTUNE"] == "0" and "DSV41_ENGRAM_DISK" not in seen["env"]
    assert (seen["min_nodes"], seen["max_nodes"]) == (8, 8)
    assert seen["executor"] == {
        "ulimit": ["nofile=1048576:1048576", "memlock=-1:-1", "stack=67108864"],
        "cap_add": ["IPC_LOCK"],
        "memory_limit": "112g",
    }
    # the serve arguments: sparkrun leaves the mp backend to its native multi-node launch
    ours_pos, ours = flags(service["head"]["command"])
    theirs_pos, theirs = flags(shlex.split(seen["command"]))
    assert ours_pos == theirs_pos == ["vllm", "serve", "deepseek-ai/DeepSeek-V4.1-Flash"]
    assert ours.pop("--distributed-executor-backend") == "mp"
    assert {k: v for k, v in ours.items() if k not in MULTI} == theirs
    assert theirs["-tp"] == "8" and theirs["--gpu-memory-utilization"] == "0.8" and theirs["--block-size"] == "128"
    assert json.loads(theirs["--speculative-config"] or "")["num_speculative_tokens"] == 5
    # a worker node: the same multi-node flags as sparkrun's node rank 1
    _, worker = flags(shlex.split(seen["node1_command"]))
    env = {"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1"}
    cfg = compose("-f", written["compose"], "--profile", "worker", "config", "--format", "json", env=env)
    assert cfg.returncode == 0, cfg.stderr
    _, ours_worker = flags(json.loads(cfg.stdout)["services"]["worker"]["command"])
    ours_worker.pop("--distributed-executor-backend")
    assert ours_worker == worker


def test_compose_config_accepts_the_file_and_names_what_is_missing(written: dict[str, Any]) -> None:
    ok = compose("-f", written["compose"], "config", "--quiet", env={"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "0"})
    assert ok.returncode == 0, ok.stderr
    bare = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "NODE_RANK")}
    missing = subprocess.run(
        ["docker", "compose", "-f", written["compose"], "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
        env=bare,
    )
    assert missing.returncode != 0 and "set MASTER_ADDR to the head node's address" in missing.stderr


ULIMIT_ROWS = {"nofile": "Max open files", "memlock": "Max locked memory", "stack": "Max stack size"}


def _n(text: str) -> int:
    return -1 if text == "unlimited" else int(text)


def _min(a: int, b: int) -> int:
    return b if a == -1 else a if b == -1 else min(a, b)


def up_check(written: dict[str, Any], tmp_path: Path, extra: str, tag: str) -> tuple[int, str, dict[str, Any] | None]:
    """`docker compose up` of the written file with the command swapped for CHECK (and `extra` overrides)."""
    override = tmp_path / f"{tag}.yaml"
    override.write_text(
        "services:\n  head:\n    deploy: !reset {}\n" + extra + "    command: " + json.dumps(["python3", "-c", CHECK])
    )
    name = f"imgbuild-recipe-{os.getpid()}-{tag}"
    env = {"MASTER_ADDR": "127.0.0.1", "NODE_RANK": "0"}
    files = ["-p", name, "-f", written["compose"], "-f", str(override)]
    try:
        up = compose(*files, "up", "--no-log-prefix", "--abort-on-container-exit", "--exit-code-from", "head", env=env)
    finally:
        compose(*files, "down", "--remove-orphans", env=env)
    line = next((ln[ln.index("{'limits'") :] for ln in up.stdout.splitlines() if "{'limits'" in ln), None)
    return up.returncode, up.stderr + up.stdout, ast.literal_eval(line) if line else None


def test_compose_up_starts_engram_mem_under_qemu_with_the_limits(written: dict[str, Any], tmp_path: Path) -> None:
    """The file's limits reach the container. A daemon may hold lower hard limits than the file asks for
    (this machine's: nofile 20000, memlock 8 MiB) and cannot raise them; then the file's values are
    clamped to what the daemon holds, checked from inside, and the unclamped file must fail on them."""
    want = yaml.safe_load(Path(written["compose"]).read_text())["services"]["head"]["ulimits"]
    code, out, free = up_check(written, tmp_path, "    ulimits: !reset {}\n", "free")
    assert code == 0 and free is not None, out
    held = {k: _n(free["limits"][row][1]) for k, row in ULIMIT_ROWS.items()}
    asked = {k: (v["soft"], v["hard"]) if isinstance(v, dict) else (v, v) for k, v in want.items()}
    clamped = {k: (_min(s, held[k]), _min(h, held[k])) for k, (s, h) in asked.items()}
    extra = "    ulimits: !override\n" + "".join(
        f"      {k}:\n        soft: {s}\n        hard: {h}\n" for k, (s, h) in clamped.items()
    )
    code, out, seen = up_check(written, tmp_path, extra if clamped != asked else "", "limits")
    assert code == 0 and seen is not None, out
    assert seen["machine"] == "aarch64"  # the arm64 image, run under qemu
    for k, row in ULIMIT_ROWS.items():
        assert [_n(x) for x in seen["limits"][row]] == list(clamped[k]), k
    assert int(seen["cap_eff"], 16) & (1 << 14)  # CAP_IPC_LOCK, from cap_add
    assert seen["memory"] == str(112 * 1024**3)  # mem_limit: 112g
    assert seen["env"]["NCCL_MAX_NCHANNELS"] == "8" and seen["env"]["VLLM_FLASHINFER_AUTOTUNE"] == "0"
    assert "DSV41_ENGRAM_DISK" not in seen["env"]
    if clamped != asked:  # the file's own values are passed to the runtime, which refuses them here
        code, out, _ = up_check(written, tmp_path, "", "asked")
        assert code != 0 and "error setting rlimit" in out, out


@pytest.mark.usefixtures("written")  # the recipe files exist before the registry is asked
def test_registry_pins_the_published_digest(built: Built, engine: Engine, tmp_path: Path) -> None:
    """--registry: the digest the registry serves for the variant's tag (pushed here with `docker push`)."""
    from tests.support.registry_env import RegistryProcess

    registry = RegistryProcess.start(tmp_path / "registry")
    pushed = f"{registry.host}/{built.repo}:engram-mem"
    try:
        engine.tag(engine.require(f"{built.repo}:engram-mem").id, pushed)
        push = subprocess.run(["docker", "push", pushed], capture_output=True, text=True, check=False)
        assert push.returncode == 0, push.stderr
        digest = next(w for w in push.stdout.split() if w.startswith("sha256:"))
        out = tmp_path / "out"
        proc = built.cli(
            "recipe", "engram-mem", "--profile", "TP8-300K", "--registry", registry.host, "--out", str(out), "--json"
        )
        assert proc.returncode == 0, proc.stderr
        data = load_json(proc.stdout)
        assert data["image"] == f"{registry.host}/{built.repo}@{digest}" and data["image_id"] is None
        assert yaml.safe_load(Path(data["recipe"]).read_text())["container"] == data["image"]
        missing = built.cli("recipe", "latest", "--profile", "TP8-1M", "--registry", registry.host, "--out", str(out))
        assert missing.returncode == 9 and "is not in the registry" in missing.stderr
    finally:
        engine.untag(pushed)
        registry.stop()
