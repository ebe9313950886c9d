"""The runtime base: the locked wheels of the real pinned vLLM release installed on the skeleton, for real.

amd64 runs natively here, so it is the fast path: the first session downloads the
locked wheels once into the cache (about 4 GB) and builds the base; later sessions find
the image by the lock's digest and build nothing. The arm64 base runs under qemu and
takes far longer: it is opt-in (IMGBUILD_TEST_ARM64_RUNTIME=1).
"""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest

from imgbuild.builder import runtime_base
from imgbuild.cache import cache_dir
from imgbuild.engine import Engine
from imgbuild.plan.labels import SKELETON
from imgbuild.platforms import Platform
from imgbuild.project import Project
from imgbuild.smoke import runtime_run
from tests.docker.conftest import run_cli
from tests.support.jsonschema_check import load_json

pytestmark = [pytest.mark.docker, pytest.mark.release]
ROOT = Path(__file__).resolve().parents[2]
VLLM = Project.load(ROOT).pin.version  # the pinned release, which the lock holds
PATCHED = (
    "vllm.model_executor.layers.sparse_attn_indexer",
    "vllm.model_executor.model_loader.weight_utils",
    "vllm.models.deepseek_v41.attention",
    "vllm.models.deepseek_v41.common.engram",
    "vllm.models.deepseek_v41.nvidia.flashinfer_sparse",
    "vllm.models.deepseek_v41.nvidia.model_state",
    "vllm.v1.attention.backends.mla.sparse_swa",
)
# Imports every module and prints one line per module: OK, or the exception's type.
PROBE = """
import importlib, sys, traceback
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        print("OK", name, flush=True)
    except BaseException as exc:
        print("FAIL", name, type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "", flush=True)
"""


def build(platform: str) -> dict[str, object]:
    proc = run_cli(ROOT, "skeleton", "--runtime", "--platform", platform, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    out: dict[str, object] = load_json(proc.stdout)
    return out


@pytest.fixture(scope="session")
def amd64_base() -> dict[str, object]:
    return build("linux/amd64")


def test_amd64_base_is_labelled_and_not_a_skeleton(amd64_base: dict[str, object], engine: Engine) -> None:
    info = engine.require(str(amd64_base["tag"]))
    assert info.arch == "amd64" and info.entrypoint == ("vllm", "serve")
    assert info.labels[runtime_base.LABEL] and SKELETON not in info.labels
    assert info.labels["imgbuild.site-packages"] == "/usr/local/lib/python3.12/dist-packages"
    lock = (ROOT / "images/runtime-lock/linux-amd64.txt").read_text().splitlines()
    assert amd64_base["wheels"] == sum(1 for line in lock if line[:1].isalnum())  # one `name==version \` per pin


def test_amd64_base_imports_vllm_and_runs_its_cli(amd64_base: dict[str, object], engine: Engine) -> None:
    tag = str(amd64_base["tag"])
    t0 = time.monotonic()
    res = engine.run(
        tag, ["-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"], entrypoint=["python3"]
    )
    import_s = time.monotonic() - t0
    assert res.exit_code == 0, res.stderr[-3000:]
    vllm, torch = res.stdout.split()[-2:]
    assert vllm == VLLM and torch.startswith("2.14.0+cu"), res.stdout  # the index's torch is a CUDA build
    t0 = time.monotonic()
    opts = runtime_run.runtime_run_options(Platform.parse("linux/amd64"), cache_dir())
    res = engine.run(tag, ["--version"], entrypoint=["vllm"], binds=opts.binds, environment=opts.env)
    version_s = time.monotonic() - t0
    assert res.exit_code == 0 and res.stdout.strip().splitlines()[-1] == VLLM, res.stderr[-3000:]
    print(f"import vllm: {import_s:.1f}s, vllm --version: {version_s:.1f}s (container start included)")


# After the imports: each module loaded from site-packages, by the flags of the .pyc beside it (3: checked-hash, as
# the base's layers carry it; a .pyc this process wrote would be a timestamp one, 0; none: -1).
BYTECODE = """
import importlib.util, collections
flags = collections.Counter()
for mod in list(sys.modules.values()):
    path = getattr(mod, "__file__", None) or ""
    if path.startswith("/usr/local/lib/python3.12/dist-packages/") and path.endswith(".py"):
        pyc = importlib.util.cache_from_source(path)
        try:
            flags[int.from_bytes(open(pyc, "rb").read()[4:8], "little")] += 1
        except OSError:
            flags[-1] += 1
print("PYC", dict(flags), flush=True)
"""


def test_amd64_base_imports_every_patched_module_without_a_gpu(amd64_base: dict[str, object], engine: Engine) -> None:
    res = engine.run(str(amd64_base["tag"]), ["-c", PROBE + BYTECODE, *PATCHED], entrypoint=["python3"], timeout=900)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("OK ", "FAIL "))]
    assert res.exit_code == 0 and len(lines) == len(PATCHED), res.stderr[-3000:] + res.stdout
    assert [ln for ln in lines if ln.startswith("FAIL")] == []
    # the base carries the bytecode of everything those imports load: nothing was compiled in the container
    (flags,) = [ln.removeprefix("PYC ") for ln in res.stdout.splitlines() if ln.startswith("PYC ")]
    counted = ast.literal_eval(flags)
    assert set(counted) == {3} and counted[3] > 1000, counted


def test_warm_build_downloads_and_builds_nothing(amd64_base: dict[str, object]) -> None:
    t0 = time.monotonic()
    again = build("linux/amd64")
    assert again["tag"] == amd64_base["tag"] and again["image_id"] == amd64_base["image_id"]
    assert again["built"] is False
    assert time.monotonic() - t0 < 30


@pytest.mark.skipif(
    os.environ.get("IMGBUILD_TEST_ARM64_RUNTIME") != "1", reason="slow: set IMGBUILD_TEST_ARM64_RUNTIME=1"
)
def test_arm64_base_imports_vllm_under_qemu_with_an_aarch64_cpuinfo(engine: Engine) -> None:
    base = build("linux/arm64")
    tag = str(base["tag"])
    assert engine.require(tag).arch == "arm64"
    opts = runtime_run.runtime_run_options(Platform.parse("linux/arm64"), cache_dir())
    assert opts.binds  # this host is not arm64, so qemu runs it
    code = "import torch, vllm, vllm.models.deepseek_v41.common.engram; print(vllm.__version__)"
    t0 = time.monotonic()
    res = engine.run(
        tag,
        ["-c", code],
        platform="linux/arm64",
        entrypoint=["python3"],
        timeout=1200,
        binds=opts.binds,
        environment=opts.env,
    )
    print(f"arm64 import under qemu: {time.monotonic() - t0:.0f}s")
    assert res.exit_code == 0 and res.stdout.strip().splitlines()[-1] == VLLM, res.stderr[-3000:]
    # Without it oneDNN's CPU probe dies, oneDNN's ISA caps or not. python runs under sh: as
    # the container's PID 1 it would ignore the SIGSEGV qemu raises and hang.
    bare = engine.run(
        tag,
        ["-c", "ulimit -c 0; python3 -c 'import torch'"],
        platform="linux/arm64",
        entrypoint=["sh"],
        timeout=1200,
        environment={**opts.env, "ONEDNN_MAX_CPU_ISA": "ASIMD", "DNNL_MAX_CPU_ISA": "ASIMD"},
    )
    assert bare.exit_code == 139 and "MIDR_EL1" in bare.stderr, (bare.exit_code, bare.stderr[-2000:])
