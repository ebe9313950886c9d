"""A synthetic vLLM with three releases, and patch stacks against it, for the
rebase / check --onto / edit-refresh tests. Real git throughout.

v1 -> v2:
- vllm/platforms/cuda.py gains five lines at the top (patches land at an offset);
- vllm/utils/arch.py gets the sm121 patch's change (upstreamed);
- vllm/config.py gets the second hunk of the config patch (partly upstreamed);
- vllm/models/deepseek_v4/ is renamed to vllm/models/deepseek_v41/ (directory rename);
- vllm/attention/backend.py moves to vllm/attention/backends/flash.py (file rename).
v2 -> v3:
- vllm/utils/arch.py is reverted to v1 (the upstreamed change is gone again);
- vllm/platforms/cuda.py changes the very line the cuda patch changes (conflict).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.support.synth import Upstream, build_on, git, make_project, numbered


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


CUDA = numbered(40, "cuda")
ARCH = numbered(30, "arch")
CONFIG = numbered(60, "cfg")
ENGRAM = numbered(40, "engram")
MODEL = numbered(20, "model")
BACKEND = numbered(50, "backend")

D4 = "vllm/models/deepseek_v4"
D41 = "vllm/models/deepseek_v41"


def build_upstream(up: Upstream) -> Upstream:
    """The three releases, in `up` (built once per process, then copied: `build_on`)."""
    return build_on("rebase_world", up, _build_upstream)


def _build_upstream(up: Upstream) -> Upstream:
    up.release(
        "v1",
        {
            "vllm/__init__.py": "",
            "vllm/platforms/cuda.py": CUDA,
            "vllm/utils/arch.py": ARCH,
            "vllm/config.py": CONFIG,
            f"{D4}/__init__.py": "",
            f"{D4}/engram.py": ENGRAM,
            f"{D4}/model.py": MODEL,
            "vllm/attention/backend.py": BACKEND,
        },
    )
    git(up.path, "mv", D4, D41)
    git(up.path, "mv", "vllm/attention/backend.py", "vllm/attention/flash_tmp.py")
    (up.path / "vllm/attention/backends").mkdir()
    git(up.path, "mv", "vllm/attention/flash_tmp.py", "vllm/attention/backends/flash.py")
    up.release(
        "v2",
        {
            "vllm/platforms/cuda.py": numbered(5, "new") + CUDA,
            "vllm/utils/arch.py": edit(ARCH, "arch 10\n", "arch ten sm121\n"),
            "vllm/config.py": edit(CONFIG, "cfg 50\n", "cfg fifty\n"),
            "vllm/attention/backends/flash.py": edit(BACKEND, "backend 45\n", "backend forty-five\n"),
        },
    )
    up.release(
        "v3",
        {
            "vllm/platforms/cuda.py": edit(numbered(5, "new") + CUDA, "cuda 20\n", "cuda 20 upstream style\n"),
            "vllm/utils/arch.py": ARCH,
        },
    )
    return up


def stack(up: Upstream, base: str, steps: list[Mapping[str, str | None]]) -> list[str]:
    """`git diff --full-index` of each step of edits, each on top of the previous one."""
    tree = git(up.path, "rev-parse", f"{base}^{{tree}}").strip()
    key = (tree, tuple(tuple(sorted(edits.items())) for edits in steps))
    if key not in _STACKS:
        _STACKS[key] = _stack(up, base, steps)
    return list(_STACKS[key])


# Stacks already made, by (tree of the base, steps): the diffs depend on nothing else.
_STACKS: dict[tuple[str, tuple[tuple[tuple[str, str | None], ...], ...]], list[str]] = {}


def _stack(up: Upstream, base: str, steps: list[Mapping[str, str | None]]) -> list[str]:
    git(up.path, "checkout", "-q", "--detach", base)
    diffs = []
    try:
        for edits in steps:
            gone = [rel for rel, text in edits.items() if text is None]
            for rel, text in edits.items():
                if text is not None:
                    (up.path / rel).parent.mkdir(parents=True, exist_ok=True)
                    (up.path / rel).write_text(text)
            if gone:
                git(up.path, "rm", "-q", "--", *gone)
            if len(gone) < len(edits):
                git(up.path, "add", "--", *(rel for rel in edits if rel not in gone))
            diffs.append(git(up.path, "diff", "--cached", "--full-index"))
            git(up.path, "commit", "-q", "--allow-empty", "-m", "step")
    finally:
        git(up.path, "checkout", "-q", "-f", "main")
    return diffs


ENGRAM_P3 = edit(ENGRAM, "engram 10\n", "engram 10\nengram on disk\n")
ENGRAM_P5 = edit(ENGRAM_P3, "engram on disk\n", "engram on disk\nsm121 guard\n")

PATCHES: dict[str, tuple[str, Mapping[str, str | None]]] = {
    "0001-cuda-sm121.patch": ("sm121", {"vllm/platforms/cuda.py": edit(CUDA, "cuda 20\n", "cuda 20 sm121\n")}),
    "0002-arch-sm121.patch": ("sm121", {"vllm/utils/arch.py": edit(ARCH, "arch 10\n", "arch ten sm121\n")}),
    "0003-config.patch": (
        "sm121",
        {"vllm/config.py": edit(edit(CONFIG, "cfg 10\n", "cfg ten\n"), "cfg 50\n", "cfg fifty\n")},
    ),
    "0004-engram-disk.patch": ("engram", {f"{D4}/engram.py": ENGRAM_P3}),
    "0005-engram-disk-module.patch": ("engram", {f"{D4}/engram_disk.py": "def load():\n    return 'disk'\n"}),
    "0006-sm121-engram-guard.patch": ("sm121", {f"{D4}/engram.py": ENGRAM_P5}),
    "0007-flash-backend.patch": (
        "sm121",
        {"vllm/attention/backend.py": edit(BACKEND, "backend 5\n", "backend five\n")},
    ),
}

VARIANTS: dict[str, dict[str, object]] = {
    "latest": {"name": "latest", "patches": "all"},
    "engram-mem": {"name": "engram-mem", "from": "latest", "revert": ["engram"]},
}


def project(root: Path, up: Upstream, names: list[str], tag: str = "v1", variants: bool = False) -> Path:
    """A project pinned to `tag` whose series is the named PATCHES (in that order)."""
    diffs = stack(up, tag, [PATCHES[n][1] for n in names])
    patches = [(n, PATCHES[n][0], d) for n, d in zip(names, diffs, strict=True)]
    return make_project(root, up, tag, patches, VARIANTS if variants else None)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under patches/, by relative path."""
    base = root / "patches"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}
