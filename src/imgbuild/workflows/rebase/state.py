"""The typed state of `patches rebase`: what `state.json` holds, the results it reports, and the session
(`.imgbuild-work/rebase`) that the start, the replay and the end share.

Frozen records per patch and one mutable `RebaseState` (saved after every patch), validated from and
dumped to JSON by pydantic: `saved(state)` is what `state.json` holds (`shapes.dump` of the state, with its kind and
version), `read` the one loader; the review report and the error details dump the records with `shapes.dump`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import Field, TypeAdapter
from pydantic.dataclasses import dataclass

from imgbuild.config.models import PinRelease, UpstreamPin, load_pins
from imgbuild.errors import ApplyError, StateError
from imgbuild.shapes import dump, named
from imgbuild.workflows.workspace import Session

# Records the replay already reports as JSON (moves, dropped hunks, upstreamed checks, files):
# carried through as they are, never read here.
Record = Mapping[str, Any]

Status = Literal["running", "stopped", "committing"]
# What happened to one patch during the replay (replay.Carry's outcomes plus the user's).
Outcome = Literal["exact", "offset", "3way", "partly-upstreamed", "upstreamed", "conflict", "skipped", "resolved"]
# What the end of the rebase did with it; a dormant patch (one in patches/upstreamed/) has its own words.
Final = Literal[Outcome, "reinstated", "still upstreamed", "left in patches/upstreamed"]
LEFT = "left in patches/upstreamed"
KIND = "rebase"


@dataclass(frozen=True)
class Pin:
    tag: str
    commit: str


@dataclass(frozen=True)
class Item:
    """One patch of the series (or a dormant one from patches/upstreamed/), with its commit on the old release."""

    filename: str
    line: int
    dormant: bool
    path: str  # relative to the project root
    old_commit: str | None = None
    old_parent: str | None = None
    blobs: Mapping[str, str] = field(default_factory=dict)  # path -> the blob it had before the patch


@dataclass(frozen=True)
class PatchResult:
    """One patch carried (or not) onto the new release."""

    filename: str
    dormant: bool
    outcome: Outcome
    reason: str = ""
    commit: str | None = None  # its commit on the new release, when it was carried
    parent: str | None = None
    moves: tuple[Record, ...] = ()
    dropped_hunks: tuple[Record, ...] = ()
    upstreamed_checks: tuple[Record, ...] = ()
    files: tuple[Record, ...] = ()
    header: str | None = None  # the DEP-3 header the author wrote in current.patch at the stop, when it changed

    @classmethod
    def of(cls, item: Item, outcome: str, reason: str = "", **more: Any) -> PatchResult:
        return cls(filename=item.filename, dormant=item.dormant, outcome=cast(Outcome, outcome), reason=reason, **more)

    def shown(self) -> ShownResult:
        """The result as `patches rebase --json` (no option) and `patches status --json` print it."""
        return ShownResult(
            self.commit,
            self.dormant,
            [dict(d) for d in self.dropped_hunks],
            self.filename,
            [dict(f) for f in self.files],
            self.header,
            [dict(m) for m in self.moves],
            self.outcome,
            self.parent,
            self.reason,
            [dict(c) for c in self.upstreamed_checks],
        )


@named("PatchResult")
@dataclasses.dataclass(frozen=True)
class ShownResult:
    """One patch carried (or not) so far."""

    # the keys in sorted order, as `patches rebase` always printed them
    commit: str | None
    dormant: bool
    dropped_hunks: list[dict[str, Any]]
    filename: str
    files: list[dict[str, Any]]
    header: str | None
    moves: list[dict[str, Any]]
    outcome: str
    parent: str | None
    reason: str
    upstreamed_checks: list[dict[str, Any]]


@dataclass(frozen=True)
class Row:
    """A patch in the final table: its result, what happened to its file, and its range-diff."""

    result: PatchResult
    outcome: Final
    file: str = "unchanged"
    range_diff: str = ""

    @property
    def filename(self) -> str:
        return self.result.filename

    @property
    def reason(self) -> str:
        return self.result.reason

    @property
    def shown_outcome(self) -> str:
        """The outcome as the table and the JSON spell it."""
        return f"{LEFT} ({self.result.outcome})" if self.outcome == LEFT else self.outcome

    def shown(self) -> RebaseRow:
        """The row of `patches rebase --json`."""
        r = self.result
        return RebaseRow(
            self.filename,
            self.filename,
            self.shown_outcome,
            self.file,
            self.reason,
            [dict(m) for m in r.moves],
            [dict(d) for d in r.dropped_hunks],
            [dict(c) for c in r.upstreamed_checks],
        )

    def to_report_json(self) -> dict[str, Any]:
        """The row of the review report: the whole result, the file and the range-diff."""
        return {
            **dump(self.result),
            "outcome": self.shown_outcome,
            "file": self.file,
            "range_diff": self.range_diff,
        }


@dataclass(frozen=True)
class Unresolved:
    path: str
    reason: str


@dataclass(frozen=True)
class Stopped:
    """Where a rebase stopped at a conflict: the work tree, the markers, what did apply."""

    filename: str
    work_tree: str
    patch: Annotated[str, Field(description="the patch's text, saved beside the state")]
    conflicts: Annotated[Mapping[str, tuple[int, ...]], Field(description="path -> the lines of its conflict markers")]
    unresolved: tuple[Unresolved, ...]
    applied: tuple[str, ...]
    reason: str
    moves: tuple[Record, ...]
    # (files: what the review's conflict report reads)
    files: Annotated[tuple[Record, ...], Field(description="the carry's per-file, per-hunk outcomes")] = ()
    pending: Annotated[
        tuple[Record, ...], Field(description="the carry preview: each patch after this one as it would carry now")
    ] = ()


@dataclass
class RebaseState:
    """`state.json`. The one mutable record: the replay loop moves it on and saves it after every patch."""

    token: str
    status: Status
    ref: str
    old: Pin
    onto: Pin
    today: str
    report: str | None
    inputs: dict[str, str | None]  # path -> sha256 when the rebase started
    items: list[Item]
    head: str
    next: int = 0
    results: list[PatchResult] = field(default_factory=list)
    stopped: Stopped | None = None
    written: list[str] = field(default_factory=list)  # written, warnings, rows: once the end is computed
    warnings: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    upstream: str = ""  # the pin that moves (its patches are the items); "": the only one
    pending: list[str] = field(default_factory=list)  # further `--onto NAME=REF`, rebased one after the other
    done_before: list[str] = field(default_factory=list)  # pins this run already rebased (written to patches/)

    @property
    def current(self) -> Item:
        return self.items[self.next]

    def record(self, result: PatchResult, head: str | None = None) -> None:
        """One more patch done."""
        self.results.append(result)
        if head is not None:
            self.head = head
        self.next += 1

    def set_item(self, index: int, **changes: Any) -> None:
        self.items[index] = replace(self.items[index], **changes)


# -- the session: .imgbuild-work/rebase ---------------------------------------------------
def session(root: Path) -> Session:
    return Session(root, KIND)


class RebaseStopped(ApplyError):
    """The rebase stopped at a conflict; the work tree holds it."""

    def __init__(self, message: str, hint: str, stopped: Stopped) -> None:
        super().__init__(message, hint, {"stopped": dump(stopped)})
        self.stopped = stopped


@dataclasses.dataclass(frozen=True)
class RebaseDone:
    old: Pin
    onto: Pin
    results: list[Row]
    written: list[str] = dataclasses.field(default_factory=list)
    report: Path | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    upstream: str = ""  # the pin that moved ("": the only one)
    earlier: list[RebaseDone] = dataclasses.field(default_factory=list)  # the pins rebased before it in one run

    def shown(self) -> Rebased:
        """The rebase as `patches rebase --json` prints it."""
        return Rebased(
            True,
            PinRelease(self.old.tag, self.old.commit),
            PinRelease(self.onto.tag, self.onto.commit),
            [r.shown() for r in self.results],
            self.written,
            str(self.report) if self.report else None,
            self.warnings,
            self.upstream,
            [d.shown() for d in self.earlier],
        )


@dataclasses.dataclass(frozen=True)
class RebaseRow:
    patch: str
    filename: str
    outcome: str
    file: str
    reason: str
    moves: list[dict[str, Any]]
    dropped_hunks: list[dict[str, Any]]
    upstreamed_checks: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Rebased:
    """A rebase that finished."""

    ok: Literal[True]
    old: PinRelease
    onto: PinRelease
    patches: list[RebaseRow]
    written: list[str]
    report: str | None
    warnings: list[str]
    upstream: Annotated[
        str, Field(description="The pin that moved (`--onto NAME=REF`); empty for a single-upstream project.")
    ]
    earlier: Annotated[
        list[Rebased],
        Field(
            description="With several `--onto NAME=REF`: the rebases of the pins before this one in the same run, "
            "each a document of this shape (without `schema`)."
        ),
    ]


@dataclasses.dataclass(frozen=True)
class RebaseInfo:
    """The rebase in progress (`.imgbuild-work/rebase/state.json`)."""

    status: Status
    old: PinRelease
    onto: PinRelease
    next: int
    stopped: Stopped | None
    results: list[ShownResult]
    patches: int
    work_tree: str


@dataclasses.dataclass(frozen=True)
class RebaseStatus:
    """`patches rebase` with no option: the rebase in progress, if any."""

    in_progress: bool
    rebase: RebaseInfo | None


@dataclasses.dataclass(frozen=True)
class Aborted:
    """A rebase aborted: patches/ and the pin as they were before it."""

    ok: Literal[True]
    message: str


def read(root: Path) -> RebaseState | None:
    """The open rebase's state, None when there is none."""
    work = session(root)
    data = work.read()
    if data is None:
        return None
    try:
        return loaded(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(
            f"{work.directory / 'state.json'} is not a rebase state this imgbuild can read ({exc})",
            hint="finish or abort it with the imgbuild that started it (`imgbuild patches rebase --abort`), "
            f"or delete {work.directory}",
        ) from exc


def load(root: Path) -> RebaseState:
    state = read(root)
    if state is None:
        raise StateError("no rebase is in progress", hint="start one with `imgbuild patches rebase --onto REF`")
    return state


def loaded(data: Mapping[str, Any]) -> RebaseState:
    """The state `state.json` holds (`saved`, or an older imgbuild's: unknown keys are ignored, missing ones take
    their defaults); ValueError (pydantic's) when it is not one."""
    return TypeAdapter(RebaseState).validate_python(data)


def saved(state: RebaseState) -> dict[str, Any]:
    """What `state.json` holds: the state's fields, its kind and version (`read` loads it; written with sorted keys)."""
    return {"kind": KIND, "version": 1, **dump(state)}


def save(root: Path, state: RebaseState) -> None:
    session(root).save(saved(state))


def moving_pin(root: Path, state: RebaseState) -> UpstreamPin:
    """The pin the rebase moves: the one its state names, else the first."""
    pins = load_pins(root / "patches" / "upstream.yaml")
    return next((p for p in pins if p.name == state.upstream), pins[0])


def message(filename: str) -> str:
    """The same message on both sides, so range-diffs show only the patch's change."""
    return f"{filename}\n"
