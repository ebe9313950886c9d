"""Every relative link of the project's Markdown (README.md, CONTRIBUTING.md, docs/, benchmarks/README.md, ...)
points at a file that is there, and a `#fragment` at a heading of that file (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".git", "build", "dist", "node_modules", ".imgbuild-work", "deploy"}  # not the project's own pages
PAGES = sorted(
    path
    for path in ROOT.rglob("*.md")
    if not any(part in SKIP or part.startswith(".") for part in path.relative_to(ROOT).parts[:-1])
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def outside_fences(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code, with their numbers."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as `-`, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in outside_fences(page.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_every_relative_link_resolves() -> None:
    names = {str(page.relative_to(ROOT)) for page in PAGES}
    assert {"README.md", "CONTRIBUTING.md", "docs/reference.md", "benchmarks/README.md"} <= names, names
    broken = []
    for page in PAGES:
        for number, line in outside_fences(page.read_text(encoding="utf-8")):
            for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):  # not in `code`
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                path, _, fragment = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(ROOT)}:{number}: ({target})"
                if not dest.exists():
                    broken.append(f"{where}: no {path}")
                elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                    broken.append(f"{where}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)
