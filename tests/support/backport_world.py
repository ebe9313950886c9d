"""A synthetic vLLM with fixes between releases, for the backport tests (tests/git/test_backports.py). Real git.

main: v1 -> pre (three lines at the top of block_pool.py) -> FIX (#44237: the
leak fix in block_pool.py) -> TESTS (vllm/other.py and tests/) -> CTX (sched.py
line 8) -> FIX2 (sched.py line 10, its context has CTX's line) -> tag v2 ->
AGAIN (the FIX line changed once more) -> tag v3 -> the fix reverted -> tag v4.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tests.support.synth import Upstream, built_once, git, numbered

POOL = numbered(40, "pool")
SCHED = numbered(20, "sched")
OTHER = numbered(10, "other")
FIX_SUBJECT = "[Core] Free prefix-cache blocks on request abort (#44237)"


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


@dataclass
class World:
    up: Upstream
    fix: str
    tests: str
    fix2: str
    again: str


def commit(up: Upstream, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (up.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (up.path / rel).write_text(text)
    git(up.path, "add", "--", *files)
    git(up.path, "commit", "-q", "-m", message)
    return git(up.path, "rev-parse", "HEAD").strip()


def build(path: Path) -> World:
    """The world at `path` (built once per process, then copied: `built_once`)."""
    return built_once("backport_world", path, _build, lambda world, at: replace(world, up=Upstream.at(at)))


def _build(path: Path) -> World:
    up = Upstream(path)
    up.release(
        "v1",
        {
            "vllm/__init__.py": "",
            "vllm/core/block_pool.py": POOL,
            "vllm/sched.py": SCHED,
            "vllm/other.py": OTHER,
            "tests/test_pool.py": "def test():\n    pass\n",
        },
    )
    pool = numbered(3, "header") + POOL
    commit(up, {"vllm/core/block_pool.py": pool}, "[Misc] header lines")
    pool = edit(edit(pool, "pool 20\n", "pool 20 freed\n"), "pool 30\n", "pool 30\nrelease(blocks)\n")
    fix = commit(
        up,
        {"vllm/core/block_pool.py": pool},
        f"{FIX_SUBJECT}\n\nHost RSS grew linearly under sustained load with prefix caching.\n\n"
        "Signed-off-by: A Dev <dev@example.invalid>\n",
    )
    tests = commit(
        up,
        {
            "vllm/other.py": edit(OTHER, "other 5\n", "other five\n"),
            "tests/test_pool.py": "def test():\n    assert 1\n",
        },
        "[Bugfix] other, with a test (#44300)",
    )
    sched = commit(up, {"vllm/sched.py": edit(SCHED, "sched 8\n", "sched eight\n")}, "[Misc] sched 8")
    del sched
    fix2 = commit(
        up,
        {"vllm/sched.py": edit(edit(SCHED, "sched 8\n", "sched eight\n"), "sched 10\n", "sched ten\n")},
        "[Bugfix] sched 10 (#44400)",
    )
    git(up.path, "tag", "v2")
    again = commit(up, {"vllm/core/block_pool.py": edit(pool, "pool 20 freed\n", "pool 20 freed twice\n")}, "again")
    git(up.path, "tag", "v3")
    # v4: upstream reverts the fix (block_pool.py back to before it)
    commit(up, {"vllm/core/block_pool.py": numbered(3, "header") + POOL}, "Revert the fix")
    git(up.path, "tag", "v4")
    return World(up, fix, tests, fix2, again)
