"""The way forward on a stock image at real size: the shipped project, and a stand-in of the stock v0.34.0 image
made from the release's own tree (the skeleton) with a FlashInfer other than the pin installed from its real wheel
(0.7.2.post1, 10,221 files, 421 MB; the stock image carries 0.7.3, which the package index lacks). The build is
refused naming both versions; `patches rebase --onto flashinfer=0.7.2.post1 --from-base` takes the release from
the image, carries 0008 onto it, and both seed images build, say 0.7.2.post1 in their labels, and pass smoke."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from imgbuild.engine import Engine
from imgbuild.project import Project
from imgbuild.upstream.mirror import Mirror
from tests.docker.conftest import run_cli
from tests.support.jsonschema_check import load_json
from tests.support.synth import git

pytestmark = [pytest.mark.docker, pytest.mark.release]

ROOT = Path(__file__).resolve().parents[2]
SITE = "/usr/local/lib/python3.12/dist-packages"
OTHER = "0.7.2.post1"
POLICY = "flashinfer/mla/_sparse_mla_sm120/_policy.py"


def test_both_seed_images_build_on_a_stock_base_with_another_flashinfer(
    engine: Engine, prefix: str, tmp_path: Path
) -> None:
    shipped = Project.load(ROOT)
    pin = shipped.pin_named("flashinfer")
    index = Mirror(pin.source, pin.package_root)  # the user's cache, as the rest of the release tier uses it
    wheel = index.fetch_wheel(OTHER)
    index_commit = index.resolve(f"v{OTHER}").commit  # the index's own 0.7.2.post1, committed by the mirror
    skeleton = load_json(run_cli(ROOT, "skeleton", "--json").stdout)["tag"]
    # the project's own cache: the pinned releases' mirrors and wheels (hard links: git writes by rename), and no
    # 0.7.2.post1 wheel, so --from-base must read the release from the image
    cache = tmp_path / "cache"
    for p in (shipped.pins[0], pin):
        mirror = Mirror(p.source, p.package_root)
        shutil.copytree(mirror.path, cache / "mirrors" / mirror.path.name, copy_function=os.link)
        (cache / "wheels").mkdir(parents=True, exist_ok=True)
        pinned = mirror.wheel_path(p.source.version)  # type: ignore[union-attr]
        os.link(pinned, cache / "wheels" / pinned.name)
    copy = cache / "mirrors" / index.path.name  # as if this cache never made 0.7.2.post1 from the index's wheel
    git(copy, "tag", "-d", f"v{OTHER}")
    git(copy, "config", "--unset", f"imgbuild.v{OTHER}.sha256")
    env = {"IMGBUILD_CACHE": str(cache)}

    # the stand-in: the release's tree with FlashInfer 0.7.2.post1 installed as a wheel installs it (the package
    # and its dist-info with RECORD), the stock image's ENTRYPOINT
    context = tmp_path / "stock"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(context / "tree")
    (context / "Dockerfile").write_text(
        f'FROM {skeleton}\nRUN rm -rf {SITE}/flashinfer\nCOPY tree/ {SITE}/\nENTRYPOINT ["vllm", "serve"]\n'
    )
    stock = f"{prefix}-stockreal:v0.34.0"
    done = subprocess.run(["docker", "build", "-q", "--platform", "linux/arm64", "-t", stock, str(context)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    shutil.rmtree(context)

    project = tmp_path / "project"
    for part in ("patches", "images"):
        shutil.copytree(ROOT / part, project / part)
    spec = project / "images" / "latest.yaml"
    spec.write_text(spec.read_text().replace("vllm/vllm-openai:v0.34.0", stock))
    (project / ".gitignore").write_text("/.imgbuild-work/\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "the shipped project"]):
        git(project, *args)
    repo = f"{prefix}-stockreal/vllm-dsv41"
    try:
        refused = run_cli(project, "build", "latest", "engram-mem", "--repository", repo, "--json", env=env)
        assert refused.returncode == 6, refused.stdout + refused.stderr
        rows = [(p["package"], p["base_version"], p["pinned"]) for p in load_json(refused.stdout)["error"]["packages"]]
        assert ("flashinfer-python", OTHER, "0.7.4") in rows

        rebased = run_cli(project, "patches", "rebase", "--onto", f"flashinfer={OTHER}", "--from-base", stock, env=env)
        assert rebased.returncode == 0, rebased.stdout + rebased.stderr
        assert f"reading flashinfer-python {OTHER} from {stock}" in rebased.stderr
        pinned = yaml.safe_load((project / "patches" / "upstream.yaml").read_text())["also"][0]
        assert pinned["tag"] == f"v{OTHER}", pinned
        # the tree read from the image is the index's own release, file for file: the same commit
        assert f"wrote {cache / 'wheels'}" in rebased.stderr
        assert Mirror(pin.source, pin.package_root, cache).resolve(f"v{OTHER}").commit == index_commit

        built = run_cli(project, "build", "latest", "engram-mem", "--repository", repo, "--json", env=env)
        assert built.returncode == 0, built.stdout + built.stderr
        for variant in ("latest", "engram-mem"):
            ref = f"{repo}:{variant}"
            smoked = run_cli(project, "smoke", ref, "--json", env=env)
            (report,) = load_json(smoked.stdout)["reports"]
            assert report["ok"], [c for c in report["checks"] if c["status"] == "fail"]
            states = {f["path"]: f["actual"] for f in report["files"]}
            assert states[POLICY] == "patched", states
            labels = engine.require(ref).labels
            assert f'"tag":"v{OTHER}"' in labels["imgbuild.upstreams"].replace(" ", ""), labels["imgbuild.upstreams"]
    finally:
        for img in engine.client.images.list():
            for tag in img.tags:
                if tag.startswith(f"{repo}:"):
                    engine.untag(tag)
        engine.untag(stock)
