"""A second upstream for a synthetic project: a fake `flashinfer/` release (git), pinned under `also:`
in the project's patches/upstream.yaml, and one patch against it (`Upstream: flashinfer`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.synth import Upstream, git, header

FI_FILES = {
    "flashinfer/__init__.py": "__version__ = '0.1'\n",
    "flashinfer/policy.py": "".join(f"def page_{i}():\n    return {i}\n" for i in range(20)),
    "flashinfer/uses_policy.py": "from flashinfer import policy\n\nPAGE = policy.page_4()\n",
}
FI_PATCHED = "flashinfer/policy.py"


def flashinfer_release(up: Upstream, tag: str = "0.1") -> str:
    return up.release(tag, dict(FI_FILES))


def add_flashinfer(root: Path, up: Upstream, *, tag: str = "0.1", group: str = "sm121") -> str:
    """Pin `up` at `tag` under `also:` and append a patch of it to the series; return the patch's file name."""
    commit = git(up.path, "rev-parse", f"{tag}^{{commit}}").strip()
    pin = {"name": "flashinfer", "package_root": "flashinfer", "tag": tag, "commit": commit}
    pin["source"] = {"kind": "git", "url": up.url}  # type: ignore[assignment]
    lines = yaml.safe_dump(pin, sort_keys=False).splitlines()
    also = "also:\n" + "".join(("  - " if i == 0 else "    ") + line + "\n" for i, line in enumerate(lines))
    pins = root / "patches" / "upstream.yaml"
    pins.write_text(pins.read_text() + also)
    old = FI_FILES[FI_PATCHED]
    diff = up.diff(tag, {FI_PATCHED: old.replace("return 4\n", "return 64  # sm121 page\n")})
    text = header("flashinfer: 64-row pages", group).replace(
        f"Group: {group}\n", f"Upstream: flashinfer\nGroup: {group}\n"
    )
    name = "0009-flashinfer-pages.patch"
    (root / "patches" / name).write_text(text + diff)
    series = root / "patches" / "series"
    series.write_text(series.read_text() + name + "\n")
    return name
