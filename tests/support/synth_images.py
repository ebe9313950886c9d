"""A small synthetic project shaped like the real one, for image tests.

A fake `vllm/` tree with four files; two 'sm121' patches and one 'engram'
patch touching two files; variants `latest` (everything) and `engram-mem`
(from latest, revert engram), like section 3 of the deployment report.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.synth import Upstream, build_on, make_project

SITE = "/usr/local/lib/python3.12/dist-packages"


def _funcs(prefix: str, n: int = 20) -> str:
    return "".join(f"def {prefix}_{i}():\n    return {i}\n" for i in range(n))


FILES = {
    "vllm/__init__.py": "__version__ = '1.0.0'\n",
    "vllm/attention.py": _funcs("attn"),
    "vllm/sparse.py": _funcs("sparse"),
    "vllm/models/engram.py": _funcs("engram"),
    "vllm/loader/weights.py": _funcs("weights"),
}
SM121 = ("vllm/attention.py", "vllm/sparse.py")
ENGRAM = ("vllm/loader/weights.py", "vllm/models/engram.py")


def release(upstream: Upstream, tag: str = "v1.0.0") -> str:
    """FILES as release `tag` (into a fresh upstream: built once per process, then copied)."""
    return build_on(f"synth_images-{tag}", upstream, lambda up: up.release(tag, dict(FILES)))


def _edit(path: str, old: str, new: str) -> dict[str, str]:
    return {path: FILES[path].replace(old, new)}


def patches(upstream: Upstream, tag: str = "v1.0.0", engram_marker: str = "disk") -> list[tuple[str, str, str]]:
    p1 = upstream.diff(tag, _edit("vllm/attention.py", "return 3\n", "return 3  # sm121\n"))
    p2 = upstream.diff(tag, _edit("vllm/sparse.py", "return 5\n", "return 5  # sm121\n"))
    p3 = upstream.diff(
        tag,
        {
            **_edit("vllm/models/engram.py", "return 7\n", f"return 7  # {engram_marker}\n"),
            **_edit("vllm/loader/weights.py", "return 2\n", f"return 2  # {engram_marker}\n"),
        },
    )
    return [("0001-attn.patch", "sm121", p1), ("0002-sparse.patch", "sm121", p2), ("0003-engram.patch", "engram", p3)]


def variants(
    repository: str,
    base: str | None = "vllm/vllm-openai:v1.0.0",
    skeleton_commands: list[str] | None = None,
) -> dict[str, dict[str, object]]:
    latest: dict[str, object] = {
        "name": "latest",
        "patches": "all",
        "image": {
            "repository": repository,
            "tags": ["latest"],
            "base": base,
            "site_packages": SITE,
            "env": {"DSV41_ENGRAM_DISK": "1"},
        },
        "smoke": {
            "commands": ["python3 -c 'import vllm'"],
            "skeleton_commands": skeleton_commands
            if skeleton_commands is not None
            else ["python3 -c 'import vllm.attention as a; assert a.attn_3() == 3'"],
        },
    }
    engram_mem: dict[str, object] = {
        "name": "engram-mem",
        "from": "latest",
        "revert": ["engram"],
        "image": {"tags": ["engram-mem"], "env": {"DSV41_ENGRAM_DISK": None}},
    }
    return {"latest": latest, "engram-mem": engram_mem}


def engram_project(root: Path, upstream: Upstream, repository: str, **kw: object) -> Path:
    """Write the project (the upstream must already have `release`d v1.0.0)."""
    return make_project(root, upstream, "v1.0.0", patches(upstream), variants(repository, **kw))  # type: ignore[arg-type]


def docker_build(tag: str, dockerfile: str, platform: str = "linux/arm64") -> None:
    """`docker build -t TAG -` of a context-free Dockerfile (a test's own small image)."""
    import subprocess

    done = subprocess.run(
        ["docker", "build", "--platform", platform, "-t", tag, "-"],
        input=dockerfile, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
