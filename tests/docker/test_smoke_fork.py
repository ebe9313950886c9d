"""In a real arm64 image (under qemu here), a smoke command run in a fork of the probe gives what `python3 -c` gives."""

from __future__ import annotations

import pytest

from imgbuild.images import probe
from imgbuild.images.docker import Engine
from tests.support import probe_fork

pytestmark = pytest.mark.docker


def test_forked_and_real_python3_c_agree_in_the_image(engine: Engine, skeleton_base: str) -> None:
    results = []
    for job in probe_fork.jobs(10):
        argv = job.argv()  # the base keeps its `vllm` ENTRYPOINT (imgbuild's images clear it)
        res = engine.run(skeleton_base, argv[1:], entrypoint=argv[:1], platform="linux/arm64", timeout=60)
        assert res.exit_code == 0, res.stderr
        results.append(probe.parse(res.stdout))
    probe_fork.compare(*results)
