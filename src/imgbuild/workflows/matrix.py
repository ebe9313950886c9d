"""`imgbuild patches check --onto REF...`: the series and each variant carried onto each ref in memory
(carry_patch over a CommitTree, never fuzz): a variant x ref x patch matrix. A variant fails on a ref
when a patch conflicts; with `strict`, on anything but exact or offset."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from typing import Annotated

from pydantic import Field, PlainSerializer

from imgbuild.patches.backport import is_backport
from imgbuild.patches.carry import Carried, Carry, MemoTree, carry_patch, lazy_blobs
from imgbuild.patches.hunks import decode
from imgbuild.patches.renames import RenameFinder
from imgbuild.project import Project
from imgbuild.upstream.git import CommitTree
from imgbuild.upstream.refs import resolve_ref
from imgbuild.upstream.requires import Need, ShownNeed
from imgbuild.workflows.backport_check import recognise

SERIES = "series"
STRICT_OK = frozenset({"exact", "offset"})


@dataclass(frozen=True)
class RefInfo:
    ref: str  # as asked: REF (the first pin) or NAME=REF
    tag: str
    commit: str
    upstream: str = ""  # the pin that moves to it; only its patches are carried there


@dataclass
class Matrix:
    upstream: str
    refs: list[RefInfo]
    stacks: list[tuple[str, tuple[str, ...]]]
    cells: dict[tuple[str, str, str], Carry] = field(default_factory=dict)  # (stack, ref, patch)
    strict: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    filenames: dict[str, str] = field(default_factory=dict)  # patch name -> file name, the spelling JSON uses
    needs: dict[str, list[Need]] = field(default_factory=dict)  # ref -> what the pins require of each other there

    def passes(self, carry: Carry) -> bool:
        return carry.outcome in STRICT_OK if self.strict else carry.ok

    def cell(self, stack: str, ref: str, name: str) -> Carry | None:
        """The patch carried onto `ref`; None when its upstream does not move there (it stays on its pin)."""
        return self.cells.get((stack, ref, name))

    def verdict(self, stack: str, ref: str) -> str:
        """PASS; CHANGES (strict: it carries, but patch files would change); FAIL (a patch conflicts)."""
        carried = [c for n in dict(self.stacks)[stack] if (c := self.cell(stack, ref, n)) is not None]
        if all(self.passes(c) for c in carried):
            return "PASS"
        return "CHANGES" if all(c.ok for c in carried) else "FAIL"

    def stack_ok(self, stack: str, ref: str) -> bool:
        return self.verdict(stack, ref) == "PASS"

    @property
    def ok(self) -> bool:
        return all(self.stack_ok(s, r.ref) for s, _ in self.stacks for r in self.refs)

    @property
    def summary(self) -> str:
        if self.ok:
            return "every variant carries"
        if all(self.verdict(s, r.ref) != "FAIL" for s, _ in self.stacks for r in self.refs):
            return "every variant carries, but some patch files would change (strict: exact or offset only)"
        return "some variants do not carry"

    def label(self, carry: Carry) -> str:
        text = carry.outcome
        if carry.outcome == "conflict":
            where = [f.path for f in carry.files if f.method == "conflict"]
            text += f": {', '.join(where)}" if where else ""
        elif self.strict and carry.outcome not in STRICT_OK:
            text += " (file would change)"
        if carry.moves:
            text += " (moved)"
        if carry.outcome == "upstreamed" and is_backport(carry.patch.fields):
            text += " (backport)"
        return text

    def _file(self, name: str) -> str:
        return self.filenames.get(name, name)

    def checked(self) -> MatrixChecked:
        """The matrix as `patches check --onto --json` prints it."""
        refs = [RefChecked(r.ref, r.tag, r.commit, r.upstream, self.seconds.get(r.ref, 0)) for r in self.refs]
        stacks = [
            StackChecked(
                stack,
                [self._file(n) for n in names],
                {
                    r.ref: Cell(
                        self.stack_ok(stack, r.ref),
                        self.verdict(stack, r.ref),
                        {
                            self._file(n): _carried(c, r.tag)
                            for n in names
                            if (c := self.cell(stack, r.ref, n)) is not None
                        },
                    )
                    for r in self.refs
                },
            )
            for stack, names in self.stacks
        ]
        needs = {r.ref: [n.shown() for n in self.needs.get(r.ref, ())] for r in self.refs}
        return MatrixChecked(self.ok, self.strict, self.upstream, refs, stacks, needs)


def _carried(carry: Carry, tag: str) -> Carried:
    shown = carry.shown()
    if not is_backport(carry.patch.fields):
        return shown
    return replace(shown, backport=True, applied_upstream=tag if carry.outcome == "upstreamed" else "")


@dataclass(frozen=True)
class RefChecked:
    ref: str
    tag: str
    commit: str
    upstream: Annotated[
        str,
        Field(
            description="The pin that moves to this ref (`NAME=REF`; a plain REF is the first pin's); only its "
            "patches are carried there, the others are absent from this ref's `patches`."
        ),
    ]
    seconds: Annotated[float, PlainSerializer(lambda v: round(v, 4), return_type=float)]


@dataclass(frozen=True)
class Cell:
    ok: bool
    verdict: str
    patches: dict[str, Carried]


@dataclass(frozen=True)
class StackChecked:
    variant: str
    patches: list[str]
    results: Annotated[dict[str, Cell], Field(description="ref -> the variant's patches carried there")]


@dataclass(frozen=True)
class MatrixChecked:
    ok: bool
    strict: bool
    upstream: str
    refs: list[RefChecked]
    variants: list[StackChecked]
    requirements: Annotated[
        dict[str, list[ShownNeed]],
        Field(description="ref -> what the pins require of each other with that ref's pin moved there"),
    ]


def check_onto(project: Project, refs: list[str], *, strict: bool = False) -> Matrix:
    """Each ref (`REF` for the first pin, `NAME=REF` for the pin NAME) is one column; only the patches of
    the upstream that moves there are carried onto it (the others stay on their pins)."""
    targets = [(item, *project.target(item)) for item in refs]
    resolved = [(item, name, resolve_ref(project.pin_named(name), ref)) for item, name, ref in targets]
    stacks: list[tuple[str, tuple[str, ...]]] = [(SERIES, tuple(p.name for p in project.patches))]
    stacks += [(v.name, v.selected) for v in project.variants.values()]
    pins = ", ".join(f"{p.name} (pinned {p.tag})" for p in project.pins)
    matrix = Matrix(pins, [RefInfo(r, x.tag, x.commit, name) for r, name, x in resolved], stacks, strict=strict)
    by_name = {p.name: p for p in project.patches}
    upstream_of = {p.name: project.upstream_of(p).name for p in project.patches}
    matrix.filenames = {p.name: p.filename for p in project.patches}
    raws = {p.name: decode((project.patches_dir / p.filename).read_bytes()) for p in project.patches}
    blobs = lazy_blobs(project.patches, project.tree)

    for ref, upstream, res in resolved:
        started = time.perf_counter()
        pinned = project.resolved(upstream).commit
        tree = MemoTree(CommitTree(res.repo, res.commit))
        finder = RenameFinder(res.repo, pinned, res.commit)
        memo: dict[tuple[str, ...], Carry] = {}
        for stack, names in stacks:
            changed: dict[str, bytes | None] = {}
            applied: tuple[str, ...] = ()
            for name in names:
                if upstream_of[name] != upstream:
                    continue  # its upstream does not move here
                key = (*applied, "|", name)
                if key not in memo:
                    carry = carry_patch(
                        by_name[name],
                        tree,
                        changed,
                        finder=finder,
                        raw=raws[name],
                        blobs=functools.partial(blobs, name),
                        label=f"upstream {res.tag}",
                    )
                    memo[key] = recognise(carry, raws[name], res.repo, pinned, res.commit, res.tag)
                carry = memo[key]
                matrix.cells[(stack, ref, name)] = carry
                if carry.ok:
                    changed.update(carry.changes)
                    applied = (*applied, name)
        matrix.seconds[ref] = time.perf_counter() - started
        matrix.needs[ref] = project.needs_if_moved({upstream: res.tag})
    return matrix
