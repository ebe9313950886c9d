"""What `imgbuild plan`, the bake file and `imgbuild build` say each variant's layers are, read from what each
prints or writes, for the test that they agree (tests/git/test_layer_agreement.py, tests/release/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from imgbuild.plan.bake import BAKE_FILE
from imgbuild.plan.layers import LayerFile, LayerNode
from tests.support.jsonschema_check import load_json
from tests.support.runner import imgbuild_here

Chains = dict[str, tuple[str, ...]]  # variant -> its layer names, bottom first
LAYER = re.compile(r"layer (\d+) \(on [^;]+; in [^)]*\): (.*)")
VARIANT = re.compile(r"(\S+) = base((?: \+ layer \d+)*)(?: \(no patched files\))?")


def from_plan(root: Path) -> Chains:
    """Each variant's layers as `imgbuild plan --json` lists them (paths per layer; the name is their digest)."""
    out = imgbuild_here(root, "plan", "--json")
    assert out.returncode == 0, out.stderr
    doc = load_json(out.stdout)
    shas = {v["variant"]: {f["path"]: f["sha256"] for f in v["files"]} for v in doc["variants"]}
    chains: Chains = {}
    paths: dict[int, list[str]] = {}
    for line in (text.strip() for text in doc["layers"]):
        if line.startswith("on ") and line.endswith(":"):  # a group of its own base (several in the project)
            paths = {}
        elif m := LAYER.fullmatch(line):
            paths[int(m[1])] = m[2].split(", ")
        elif m := VARIANT.fullmatch(line):
            v = m[1]
            layers = [paths[int(i)] for i in re.findall(r"layer (\d+)", m[2])]
            files = [tuple(sorted(LayerFile(p, shas[v][p]) for p in ps)) for ps in layers]
            chains[v] = tuple(LayerNode(0, None, fs, ()).name for fs in files)
        else:
            assert line.startswith("note: "), line
    assert set(chains) == set(shas), doc["layers"]
    return chains


def from_bake(root: Path) -> Chains:
    """Each target's `imgbuild.layers` label in the bake file."""
    doc = json.loads((root / BAKE_FILE).read_text())
    return {name: tuple(json.loads(t["labels"]["imgbuild.layers"])) for name, t in doc["target"].items()}


def from_build(root: Path, *args: str, env: dict[str, str]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(variant, platform) -> the image's layers in `imgbuild build --dry-run --json ARGS` (its label says the same)."""
    out = imgbuild_here(root, "build", "--dry-run", "--json", *args, env=env)
    assert out.returncode == 0, out.stderr
    images = load_json(out.stdout)["images"]
    for i in images:
        assert json.loads(i["labels"]["imgbuild.layers"]) == i["layers"]
    return {(i["variant"], i["platform"]): tuple(i["layers"]) for i in images}


def assert_agree(root: Path, no_daemon: dict[str, str]) -> Chains:
    """plan, the bake file and build (every variant alone, all, every platform) give each variant the same layers."""
    planned = from_plan(root)
    assert from_bake(root) == planned
    built: dict[tuple[str, str], tuple[str, ...]] = {}
    for args in ([], ["--platform", "all"], *([v] for v in planned), *([v, "--platform", "all"] for v in planned)):
        for (variant, platform), layers in from_build(root, *args, env=no_daemon).items():
            assert layers == planned[variant], (args, variant, platform)
            built[(variant, platform)] = layers
    assert {v for v, _ in built} == set(planned)
    return planned
