"""Launcher checks against real containers (smoke/launchcheck.py): arm64 images on the skeleton, under qemu.

The skeleton base has ENTRYPOINT ["vllm","serve"] like stock vLLM images, and procps for `kill`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from imgbuild.engine import Engine
from imgbuild.smoke import launchcheck
from tests.support.synth_images import docker_build

pytestmark = pytest.mark.docker

WRAPPER = "printf '#!/bin/sh\\nexport READY=1\\nexec \"$@\"\\n' > /e.sh && chmod +x /e.sh"
CASES = {
    "cleared": ("ENTRYPOINT []", [("entrypoint", "pass"), ("kill", "pass")]),
    "passthrough": (f'RUN {WRAPPER}\nENTRYPOINT ["/e.sh"]', [("entrypoint", "pass"), ("kill", "pass")]),
    "consuming": ("", [("entrypoint", "fail"), ("kill", "pass")]),
    "no-kill": ("RUN rm -f /usr/bin/kill /bin/kill\nENTRYPOINT []", [("entrypoint", "pass"), ("kill", "fail")]),
}


@pytest.fixture(scope="module")
def images(engine: Engine, skeleton_base: str, prefix: str) -> Iterator[dict[str, str]]:
    made = {}
    for name, (lines, _) in CASES.items():
        tag = f"{prefix}-launch:{name}"
        dockerfile = f"FROM {skeleton_base}\n{lines}\n"
        docker_build(tag, dockerfile)
        made[name] = tag
    yield made
    for tag in made.values():
        engine.untag(tag)


@pytest.mark.parametrize("case", list(CASES))
def test_launcher_checks(engine: Engine, images: dict[str, str], case: str) -> None:
    got = launchcheck.run(engine, engine.require(images[case]), "linux/arm64")
    assert [(name, status) for name, status, _ in got] == CASES[case][1], got
    if case == "passthrough":
        assert "kept" in got[0][2]
    if case == "consuming":
        assert "['vllm', 'serve'] consumes" in got[0][2]
    if case == "no-kill":
        assert "kill -0" in got[1][2]
