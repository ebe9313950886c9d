"""Choose the image layers (pure): which variants share layers (`LayerKey`, `share_layers`: the one place that
decides it, for `plan`, the bake file and `build`), and within such a group, files shared by several variants go into
one layer below them all, most-shared first; a file that no layering can share is copied into several layers
(`notes`)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from imgbuild.patches.variants import ResolvedVariant, VariantPlan


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


# -- which variants share layers ---------------------------------------------------------
@dataclass(frozen=True, order=True)
class LayerKey:
    """Variants with equal keys share layers: those whose images/ name one base and one site-packages directory.
    It is read from images/ alone, so `--base`, `--platform` and what the daemon answers change nothing: `plan`,
    the bake file (one target for all of a variant's platforms) and `build` give every variant the same layers."""

    base: str  # image.base, "" when unset
    site_packages: str  # image.site_packages, "" when unset (asked from the base at build time)

    @classmethod
    def of(cls, variant: ResolvedVariant) -> LayerKey:
        return cls(variant.image.base or "", variant.image.site_packages or "")

    def __str__(self) -> str:
        base = self.base or "(image.base not set)"
        return f"{base}, site-packages {self.site_packages or '(asked from the base)'}"


@dataclass(frozen=True)
class SharedLayers:
    """The layers of every variant: one `LayerPlan` per `LayerKey`."""

    groups: tuple[tuple[LayerKey, LayerPlan], ...]  # sorted by key

    def plan_of(self, variant: str) -> LayerPlan:
        return next(lp for _, lp in self.groups if variant in dict(lp.tops))

    def chain(self, variant: str) -> tuple[LayerNode, ...]:
        """`variant`'s layers, bottom first."""
        lp = self.plan_of(variant)
        return tuple(lp.nodes[i] for i in lp.chain(variant))

    def describe(self, variants: Collection[str] | None = None) -> list[str]:
        """`describe` of each group holding one of `variants` (None: every group); with several groups in all,
        each one's lines under a line naming its base."""
        shown = [(k, lp) for k, lp in self.groups if variants is None or any(v in dict(lp.tops) for v in variants)]
        if len(self.groups) == 1:
            return [line for _, lp in shown for line in describe(lp)]
        return [line for k, lp in shown for line in (f"on {k}:", *(f"  {d}" for d in describe(lp)))]


def share_layers(plans: Sequence[VariantPlan]) -> SharedLayers:
    """Plan the layers of `plans` (give it every variant of the project: a variant built alone then gets the
    layers it has beside the others, so `build engram-mem` makes the COPY `build latest` reuses)."""
    groups: dict[LayerKey, dict[str, frozenset[LayerFile]]] = {}
    for p in plans:
        groups.setdefault(LayerKey.of(p.variant), {})[p.variant.name] = overlay_files(p)
    return SharedLayers(tuple((key, plan_layers(groups[key])) for key in sorted(groups)))
