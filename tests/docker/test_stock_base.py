"""Bases as the stock vLLM image really is: bytecode of the release beside every module (vLLM's Dockerfile sets
UV_COMPILE_BYTECODE=1), in each of Python's three invalidation modes, the stock ENTRYPOINT, and a FlashInfer other
than the pin (what the stock image's own vLLM requires)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from imgbuild.engine import Engine
from tests.docker.conftest import MakeProject, run_cli
from tests.support.jsonschema_check import load_json
from tests.support.synth_images import docker_build

pytestmark = pytest.mark.docker

SITE = "/usr/local/lib/python3.12/dist-packages"
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
