"""Choose the image layers for a set of variants (pure): files shared by a group of variants go into one layer
below them all, most-shared first; a file that no layering can share is copied into several layers (`notes`)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from imgbuild.patches.variants import VariantPlan


def digest_lines(lines: Iterable[str]) -> str:
    """The sha256 of `lines`, each ended by a newline."""
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


@dataclass(frozen=True, order=True)
class LayerFile:
    path: str  # relative to site-packages, e.g. vllm/models/x.py
    sha256: str


NAME_FORMAT = "imgbuild-bake-layer/1"  # the name's format (its first user was the bake file)


@dataclass(frozen=True)
class LayerNode:
    index: int
    parent: int | None  # None: directly on the base
    files: tuple[LayerFile, ...]  # sorted by path
    variants: tuple[str, ...]  # variants whose image contains this layer

    @property
    def name(self) -> str:
        """The layer's context directory (`layers/<name>/`) and its entry in `imgbuild.layers`: a digest of
        its files, so equal files give an equal COPY (and BuildKit one snapshot) whichever image holds it."""
        return digest_lines([NAME_FORMAT, *(f"{f.path}\0{f.sha256}" for f in self.files)])[:16]


@dataclass(frozen=True)
class LayerPlan:
    nodes: tuple[LayerNode, ...]  # parents before children
    tops: tuple[tuple[str, int | None], ...]  # variant -> its top layer (None: the base alone)
    notes: tuple[str, ...]

    def top(self, variant: str) -> int | None:
        return dict(self.tops)[variant]

    def chain(self, variant: str) -> tuple[int, ...]:
        """Layer indexes of `variant`'s image, bottom first."""
        out: list[int] = []
        node = self.top(variant)
        while node is not None:
            out.append(node)
            node = self.nodes[node].parent
        return tuple(reversed(out))


def overlay_files(plan: VariantPlan) -> frozenset[LayerFile]:
    """The files a variant's image must overlay on the base: its patched ones."""
    return frozenset(LayerFile(f.path, f.sha256) for f in plan.files if f.state == "patched")


def plan_layers(wanted: Mapping[str, frozenset[LayerFile]]) -> LayerPlan:
    """Arrange `wanted` (variant -> files to overlay) into shared layers."""
    parents: list[int | None] = []
    contents: list[frozenset[LayerFile]] = []
    tops: dict[str, int | None] = {}

    def add(parent: int | None, files: frozenset[LayerFile]) -> int:
        parents.append(parent)
        contents.append(files)
        return len(parents) - 1

    def place(group: Sequence[str], prefix: frozenset[LayerFile], parent: int | None) -> None:
        if not group:
            return
        common = frozenset.intersection(*(wanted[v] for v in group))
        if common - prefix:
            parent = add(parent, common - prefix)
            prefix = common
        rest = []
        for v in group:
            if wanted[v] == prefix:
                tops[v] = parent
            else:
                rest.append(v)
        if len(rest) <= 1:
            for v in rest:
                place([v], prefix, parent)
            return
        counts = Counter(f for v in rest for f in wanted[v] - prefix)
        best = max(counts.values())
        if best == 1:  # nothing more is shared: one layer each
            for v in rest:
                place([v], prefix, parent)
            return
        pivot = min(f for f, c in counts.items() if c == best)
        with_pivot = [v for v in rest if pivot in wanted[v]]
        place(with_pivot, prefix, parent)
        place([v for v in rest if pivot not in wanted[v]], prefix, parent)

    names = sorted(wanted)
    if names:
        place(names, frozenset(), None)

    members: dict[int, set[str]] = {i: set() for i in range(len(parents))}
    for v, top in tops.items():
        node = top
        while node is not None:
            members[node].add(v)
            node = parents[node]
    nodes = tuple(
        LayerNode(i, parents[i], tuple(sorted(contents[i])), tuple(sorted(members[i]))) for i in range(len(parents))
    )
    return LayerPlan(nodes, tuple((v, tops[v]) for v in names), _notes(nodes))


def _notes(nodes: Sequence[LayerNode]) -> tuple[str, ...]:
    where: dict[LayerFile, list[int]] = {}
    for node in nodes:
        for f in node.files:
            where.setdefault(f, []).append(node.index)
    notes = []
    for f, idx in sorted(where.items()):
        if len(idx) > 1:
            users = sorted({v for i in idx for v in nodes[i].variants})
            notes.append(
                f"{f.path} is copied into layers {', '.join(map(str, idx))}: variants {', '.join(users)} carry it "
                "but no layer order lets them share one copy (the layout forces stacking)"
            )
    return tuple(notes)


def describe(plan: LayerPlan) -> list[str]:
    """Human-readable lines: one per layer, then one per variant, then notes."""
    lines = []
    for node in plan.nodes:
        below = "base" if node.parent is None else f"layer {node.parent}"
        lines.append(
            f"layer {node.index} (on {below}; in {', '.join(node.variants)}): " + ", ".join(f.path for f in node.files)
        )
    for variant, top in plan.tops:
        chain = plan.chain(variant)
        shown = " + ".join(["base", *(f"layer {i}" for i in chain)])
        lines.append(f"{variant} = {shown}" + ("" if top is not None else " (no patched files)"))
    lines.extend(f"note: {n}" for n in plan.notes)
    return lines
