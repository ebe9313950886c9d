"""Bases as the stock vLLM image really is: bytecode of the release beside every module (vLLM's Dockerfile sets
UV_COMPILE_BYTECODE=1), in each of Python's three invalidation modes, the stock ENTRYPOINT, and a FlashInfer other
than the pin (what the stock image's own vLLM requires)."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from imgbuild.builder.base_wheel import record_hash
from imgbuild.digests import sha256_file
from imgbuild.engine import Engine
from tests.docker.conftest import MakeProject, run_cli
from tests.git import test_pin_requires as pins
from tests.support.jsonschema_check import load_json
from tests.support.synth import git, header
from tests.support.synth_images import docker_build

pytestmark = pytest.mark.docker

SITE = "/usr/local/lib/python3.12/dist-packages"
FI_DIST = "flashinfer_python-0.2.0.dist-info"
# one planned module per mode: the release's bytecode, as an installer left it
MODES = {"vllm/attention.py": "UNCHECKED_HASH", "vllm/sparse.py": "CHECKED_HASH", "vllm/models/engram.py": "TIMESTAMP"}
COMPILE = "; ".join(
    f"py_compile.compile('{SITE}/{path}', doraise=True, invalidation_mode=py_compile.PycInvalidationMode.{mode})"
    for path, mode in MODES.items()
)
# What the interpreter's import system would run for each module, against the file compiled: True where equal.
ASK = (
    "import importlib.machinery as m, sys\n"
    "for p in sys.argv[1:]:\n"
    "    own = compile(open(p, 'rb').read(), p, 'exec', dont_inherit=True)\n"
    "    print(p, m.SourceFileLoader('x', p).get_code('x') == own)\n"
)

PYC_MODE = (  # the flags of a module's .pyc: 0 timestamp, 1 unchecked-hash, 3 checked-hash
    "import importlib.util as u, sys; "
    "print(int.from_bytes(open(u.cache_from_source(sys.argv[1]), 'rb').read()[4:8], 'little'))"
)


@pytest.fixture
def bytecode_base(engine: Engine, skeleton_base: str, prefix: str) -> Iterator[str]:
    tag = f"{prefix}-bytecodebase:1"
    dockerfile = f'FROM {skeleton_base}\nRUN python3 -c "import py_compile; {COMPILE}"\nENTRYPOINT ["vllm", "serve"]\n'
    docker_build(tag, dockerfile)
    yield tag
    engine.untag(tag)


def loads(engine: Engine, ref: str) -> dict[str, bool]:
    res = engine.run(ref, ["-c", ASK, *(f"{SITE}/{p}" for p in MODES)], entrypoint=["python3"])
    assert res.exit_code == 0, res.stderr
    return {p.removeprefix(f"{SITE}/"): ok == "True" for p, ok in (ln.split() for ln in res.stdout.splitlines())}


def test_every_patched_module_loads_as_patched_over_each_bytecode_mode(
    make_project: MakeProject, engine: Engine, prefix: str, bytecode_base: str, tmp_path: Path
) -> None:
    # the base as the stock image is: an unchecked-hash .pyc of the release makes Python run the release's attention
    assert loads(engine, bytecode_base)["vllm/attention.py"] is True  # (the base's own files: the release's code)
    project = make_project("stock", base=bytecode_base)
    env = {"IMGBUILD_CACHE": str(tmp_path / "cache")}
    built = run_cli(project, "build", "latest", "engram-mem", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    repo = f"{prefix}-stock"
    # latest overlays all three: the interpreter loads each patched file's code; engram-mem keeps the release's
    # engram.py and its .pyc, and overlays the other two
    assert loads(engine, f"{repo}:latest") == dict.fromkeys(MODES, True)
    assert loads(engine, f"{repo}:engram-mem") == dict.fromkeys(MODES, True)
    for tag in ("latest", "engram-mem"):
        (report,) = load_json(run_cli(project, "smoke", f"{repo}:{tag}", "--json", env=env).stdout)["reports"]
        checks = {c["name"]: c for c in report["checks"]}
        assert report["ok"], [c for c in report["checks"] if c["status"] == "fail"]
        assert checks["loads vllm/attention.py"]["status"] == "pass"
        assert checks["loads vllm/attention.py"]["detail"].endswith("(checked-hash)")  # imgbuild's, not the base's

    # an image whose .pyc shadows its patched file (as one overlaid without bytecode would be): smoke fails on it
    shadowed = f"{repo}:shadowed"
    stale = (
        "import py_compile, importlib.util as u; "
        f"open('/tmp/release.py', 'w').write('x = 1\\n'); "
        f"py_compile.compile('/tmp/release.py', cfile=u.cache_from_source('{SITE}/vllm/attention.py'), "
        "doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"
    )
    docker_build(shadowed, f'FROM {repo}:latest\nRUN python3 -c "{stale}"\n')
    assert loads(engine, shadowed)["vllm/attention.py"] is False
    smoked = run_cli(project, "smoke", shadowed, "--json", env=env)
    (report,) = load_json(smoked.stdout)["reports"]
    check = next(c for c in report["checks"] if c["name"] == "loads vllm/attention.py")
    assert smoked.returncode != 0 and check["status"] == "fail", check
    assert "(unchecked-hash), not this file's code" in check["detail"]


def test_a_bake_built_image_loads_the_patched_code_over_each_bytecode_mode(
    make_project: MakeProject, engine: Engine, prefix: str, bytecode_base: str
) -> None:
    """The bake file is written without a base: its Dockerfile compiles each layer's bytecode with the base's own
    python3 in a stage of its own, so `docker buildx bake` makes what `imgbuild build` makes: checked-hash `.pyc`
    beside every overlaid module, which no `.pyc` of the base can shadow."""
    project = make_project("stockbake", base=bytecode_base)
    assert run_cli(project, "bake").returncode == 0
    env = {**os.environ, "REGISTRY": f"{prefix}-bake"}
    built = subprocess.run(
        ["docker", "buildx", "bake", "-f", "buildkit/docker-bake.json", "--load", "--set", "*.platform=linux/arm64",
         "--set", "*.cache-from=", "--set", "*.cache-to=", "latest", "engram-mem"],
        cwd=project, capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    for tag in ("latest", "engram-mem"):
        image = f"{prefix}-bake/{prefix}-stockbake:{tag}"
        try:
            assert loads(engine, image) == dict.fromkeys(MODES, True), tag
            res = engine.run(image, ["-c", PYC_MODE, f"{SITE}/vllm/attention.py"], entrypoint=["python3"])
            # the layer's own .pyc (flags 0b11), not the base's unchecked-hash one (1): the synthetic patch of
            # attention.py changes a comment only, so its code object is the release's either way
            assert res.stdout.strip() == "3", res.stderr
        finally:
            engine.untag(image)


@pytest.mark.release
def test_a_base_with_the_flashinfer_its_vllm_requires_is_refused_naming_versions_and_why(
    engine: Engine, prefix: str, tmp_path: Path
) -> None:
    """The real project on a stand-in of the stock v0.34.0 image: FlashInfer 0.7.3 by its metadata (what vLLM
    0.34.0 requires and its Dockerfile installs, with the kernels of `flashinfer download-kernels`)."""
    root = Path(__file__).resolve().parents[2]
    skeleton = load_json(run_cli(root, "skeleton", "--json").stdout)["tag"]
    stock = f"{prefix}-stockfi:v0.34.0"
    dist = " ".join(f"{SITE}/{d}-0.7.3.dist-info" for d in ("flashinfer_python", "flashinfer_cubin"))
    docker_build(stock, f'FROM {skeleton}\nRUN mkdir -p {dist}\nENTRYPOINT ["vllm", "serve"]\n')
    try:
        repo = f"{prefix}-stockfi/vllm-dsv41"
        failed = run_cli(root, "build", "latest", "engram-mem", "--base", stock, "--repository", repo, "--json")
        assert failed.returncode == 6, failed.stdout + failed.stderr
        error = load_json(failed.stdout)["error"]
        assert error["message"].startswith(f"base {stock} does not carry the pinned packages; nothing was built")
        assert "flashinfer-python: the base has 0.7.3, the stack pins 0.7.4" in error["message"]
        assert "overrides flashinfer-python==0.7.3 with 0.7.4 because" in error["message"]
        assert [(p["package"], p["base_version"], p["pinned"]) for p in error["packages"]] == [
            ("flashinfer-python", "0.7.3", "0.7.4"),
            ("flashinfer-cubin", "0.7.3", "0.7.4"),
        ]
        assert not [t for img in engine.client.images.list() for t in img.tags if t.startswith(f"{repo}:")]

        # `plan --bases` shows the same before any build: the project with the stand-in as its image.base
        project = tmp_path / "project"
        for part in ("patches", "images"):
            shutil.copytree(root / part, project / part)
        spec = project / "images" / "latest.yaml"
        spec.write_text(spec.read_text().replace("vllm/vllm-openai:v0.34.0", stock))
        planned = run_cli(project, "plan", "--bases", "--json")
        assert planned.returncode == 0, planned.stderr
        (base,) = load_json(planned.stdout)["bases"]
        assert base["ref"] == stock and base["variants"] == ["engram-mem", "latest"] and not base["unread"]
        rows = {p["package"]: (p["base_version"], p["pinned"], p["agrees"]) for p in base["packages"]}
        assert rows == {
            "vllm": (None, "0.34.0", True),  # the stand-in has no dist-info for it: the drift check compares files
            "flashinfer-python": ("0.7.3", "0.7.4", False),
            "flashinfer-cubin": ("0.7.3", "0.7.4", False),
        }
        text = run_cli(project, "plan", "--bases").stdout
        assert (
            "DIFF flashinfer-python: the base has 0.7.3, the stack pins 0.7.4: patches/upstream.yaml overrides" in text
        )
    finally:
        engine.untag(stock)


def installed_tree(root: Path, files: dict[str, bytes], dist_info: str) -> None:
    """`files` as an installer leaves them in site-packages: with METADATA, WHEEL, INSTALLER and a RECORD."""
    files = {**files, f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{dist_info}/INSTALLER"] = b"uv\n"
    rows = [f"{p},{record_hash(d)},{len(d)}" for p, d in files.items() if not p.endswith("INSTALLER")]
    files[f"{dist_info}/RECORD"] = "\n".join([*rows, f"{dist_info}/INSTALLER,,", f"{dist_info}/RECORD,,", ""]).encode()
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def test_a_stock_base_with_another_flashinfer_builds_once_the_pin_is_taken_from_it(
    engine: Engine, prefix: str, skeleton_base: str, tmp_path: Path
) -> None:
    """A project pinning vllm 1.0.0 and flashinfer-python 0.1.0 (real wheels, made here; one patch on each) and a
    stand-in of its stock image whose FlashInfer is 0.2.0, a release the package index does not have: the build
    is refused naming both versions; `patches rebase --onto flashinfer=0.2.0 --from-base` takes the release from
    the base (the index is not reachable), carries the FlashInfer patch onto it, and both images build and pass
    smoke."""
    cache = Path(os.environ["IMGBUILD_CACHE"])
    wheels = cache / "wheels"
    wheels.mkdir(parents=True)
    v1, f1 = pins.vllm_wheel(wheels, "1.0.0"), pins.fi_wheel(wheels, "0.1.0")
    stock = f"{prefix}-stock2:v1"
    root = tmp_path / "p"
    (root / "patches").mkdir(parents=True)
    top = pins.pin_yaml("vllm", "vllm", "1.0.0", v1, "manylinux_2_28_aarch64")
    fi = pins.pin_yaml("flashinfer", "flashinfer-python", "0.1.0", f1, "any")
    (root / "patches" / "upstream.yaml").write_text(yaml.safe_dump({**top, "also": [fi]}, sort_keys=False))
    (root / "patches" / "0001-m.patch").write_text(
        header("return 2", "x") + pins.diff("vllm/m.py", pins.V_OLD, pins.V_NEW)
    )
    fi_header = header("64-token pages", "x").replace("Group: x\n", "Upstream: flashinfer\nGroup: x\n")
    (root / "patches" / "0002-fi.patch").write_text(
        fi_header + pins.diff("flashinfer/policy.py", pins.F_OLD, pins.F_NEW)
    )
    (root / "patches" / "series").write_text("0001-m.patch\n0002-fi.patch\n")
    image = {"repository": f"{prefix}-stock2/out", "tags": ["latest"], "base": stock, "site_packages": SITE}
    (root / "images").mkdir()
    (root / "images" / "latest.yaml").write_text(yaml.safe_dump({"name": "latest", "image": image}))
    (root / ".gitignore").write_text("/.imgbuild-work/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the project")

    # the stock image: a Debian python3 with vllm 1.0.0's tree and FlashInfer 0.2.0 installed, with its RECORD and
    # a comment the patch does not touch, so 0.2.0's policy.py is not 0.1.0's
    context = tmp_path / "stock"
    installed_tree(context / "tree", {"vllm/__init__.py": b"", "vllm/m.py": pins.V_OLD}, "vllm-1.0.0.dist-info")
    fi_files = {"flashinfer/__init__.py": b"", "flashinfer/policy.py": b"# 0.2.0\n" + pins.F_OLD}
    meta = b"Metadata-Version: 2.4\nName: flashinfer-python\nVersion: 0.2.0\n"
    installed_tree(context / "tree", {**fi_files, f"{FI_DIST}/METADATA": meta}, FI_DIST)
    (context / "Dockerfile").write_text(
        f"FROM {skeleton_base}\nRUN rm -rf {SITE}/vllm {SITE}/flashinfer\nCOPY tree/ {SITE}/\n"
        'ENTRYPOINT ["vllm", "serve"]\n'
    )
    done = subprocess.run(["docker", "build", "-q", "--platform", "linux/arm64", "-t", stock, str(context)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        refused = run_cli(root, "build", "latest", "--json")
        assert refused.returncode == 6, refused.stdout + refused.stderr
        [row] = load_json(refused.stdout)["error"]["packages"]
        assert (row["package"], row["base_version"], row["pinned"]) == ("flashinfer-python", "0.2.0", "0.1.0")

        offline = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "1"}
        rebased = run_cli(root, "patches", "rebase", "--onto", "flashinfer=0.2.0", "--from-base", stock, env=offline)
        assert rebased.returncode == 0, rebased.stdout + rebased.stderr
        assert f"reading flashinfer-python 0.2.0 from {stock}" in rebased.stderr
        pinned = yaml.safe_load((root / "patches" / "upstream.yaml").read_text())["also"][0]
        wheel = wheels / "flashinfer_python-0.2.0-py3-none-any.whl"
        assert pinned["tag"] == "v0.2.0" and pinned["source"]["sha256"] == sha256_file(wheel)
        with zipfile.ZipFile(wheel) as zf:
            assert zf.read("flashinfer/policy.py") == b"# 0.2.0\n" + pins.F_OLD

        built = run_cli(root, "build", "latest", "--json")
        assert built.returncode == 0, built.stdout + built.stderr
        (report,) = load_json(run_cli(root, "smoke", f"{prefix}-stock2/out:latest", "--json").stdout)["reports"]
        assert report["ok"], [c for c in report["checks"] if c["status"] == "fail"]
        files = {f["path"]: f["actual"] for f in report["files"]}
        assert files == {"vllm/m.py": "patched", "flashinfer/policy.py": "patched"}
        labels = engine.require(f"{prefix}-stock2/out:latest").labels
        assert '"tag":"v0.2.0"' in labels["imgbuild.upstreams"].replace(" ", ""), labels["imgbuild.upstreams"]
    finally:
        engine.untag(stock)
