"""Property: rebasing onto the commit the series is pinned to changes no byte in patches/."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from imgbuild.workflows.rebase import control as rebase
from tests.support.rebase_world import snapshot, stack
from tests.support.synth import Upstream, make_project

FILES = {
    "vllm/a.py": "".join(f"a = {i}\n" for i in range(30)),
    "vllm/b.py": "def f():\r\n    return 1\r\n" * 6,  # CRLF lines
    "vllm/c.py": "x = 1\ny = 2\nz = 3",  # no newline at the end
    "vllm/sub/d.py": "pass\n" * 12,  # every line the same
}
WORDS = ["pass\n", "x = 1\n", "return 0\n", "# sm121\n", "\n", "y = 2\r\n", "tail"]


@pytest.fixture(scope="module")
def shared_upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    up = Upstream(tmp_path_factory.mktemp("prop") / "upstream")
    up.release("v1", dict(FILES))
    return up


@st.composite
def series(draw: st.DrawFn) -> list[dict[str, str | None]]:
    """1-4 stacked patches, each changing one or two files (or creating one)."""
    current = dict(FILES)
    steps: list[dict[str, str | None]] = []
    for n in range(draw(st.integers(1, 4))):
        step: dict[str, str | None] = {}
        for path in draw(st.lists(st.sampled_from(sorted(FILES)), min_size=1, max_size=2, unique=True)):
            lines = current[path].splitlines(keepends=True)
            for _ in range(draw(st.integers(1, 3))):
                op = draw(st.sampled_from(["replace", "insert", "delete"]))
                at = draw(st.integers(0, max(len(lines) - 1, 0)))
                word = draw(st.sampled_from(WORDS[:-1]))
                if op == "insert" or not lines:
                    lines.insert(at, word)
                elif op == "replace":
                    lines[at] = word
                elif len(lines) > 1:
                    del lines[at]
            text = "".join(lines)
            if text != current[path]:
                step[path] = current[path] = text
        if draw(st.booleans()):
            step[f"vllm/new_{n}.py"] = draw(st.sampled_from(WORDS)) * draw(st.integers(1, 4))
        if step:
            steps.append(step)
    return steps or [{"vllm/a.py": FILES["vllm/a.py"] + "end = 1\n"}]


@settings(
    max_examples=int(os.environ.get("IMGBUILD_PROPERTY_EXAMPLES", "10")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=series())
@example(  # found by hypothesis: one hunk spanning a short file must come back with the same -U
    steps=[
        {"vllm/b.py": "pass\n    return 1\r\n" + "def f():\r\n    return 1\r\n" * 5},
        {
            "vllm/b.py": "y = 2\r\n    return 1\r\ndef f():\r\n    return 1\r\npass\n    return 1\r\n" * 1
            + "def f():\r\n    return 1\r\ndef f():\r\n    return 1\r\npass\n    return 1\r\n"
        },
    ]
)
def test_rebase_onto_the_same_commit_is_byte_identical(
    shared_upstream: Upstream, steps: list[dict[str, str | None]]
) -> None:
    diffs = stack(shared_upstream, "v1", steps)
    work = Path(tempfile.mkdtemp(prefix="imgbuild-prop-"))
    try:
        patches = [(f"{i:04d}-p.patch", "engram" if i % 2 else "sm121", d) for i, d in enumerate(diffs, start=1)]
        root = make_project(work / "proj", shared_upstream, "v1", patches)
        before = snapshot(root)
        done = rebase.start(root, "v1", date="2099-12-31")
        assert {r.outcome for r in done.results} == {"exact"}
        assert done.written == []
        assert snapshot(root) == before
        # The same commit spelled differently changes nothing either.
        commit = root.joinpath("patches", "upstream.yaml").read_text().split("commit: ")[1].split()[0]
        rebase.start(root, commit, date="2099-12-31")
        assert snapshot(root) == before
    finally:
        shutil.rmtree(work)
