"""The typed state of `patches rebase`: what `state.json` holds, and the results it reports.

Pure data: frozen records per patch, one mutable `RebaseState` (saved after
every patch, so it changes in place), and the conversion to and from the JSON
that `state.json`, `--json` and the review report carry. The JSON keys are the
ones the files had when they were plain dicts, so an interrupted rebase from
an older imgbuild resumes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast, get_args

# Records the replay already reports as JSON (moves, dropped hunks, upstreamed checks, files):
# carried through as they are, never read here.
Record = Mapping[str, Any]

Status = Literal["running", "stopped", "committing"]
# What happened to one patch during the replay (replay.Carry's outcomes plus the user's).
Outcome = Literal["exact", "offset", "3way", "partly-upstreamed", "upstreamed", "conflict", "skipped", "resolved"]
# What the end of the rebase did with it; a dormant patch (one in patches/upstreamed/) has its own words.
Final = Literal[
    "exact",
    "offset",
    "3way",
    "partly-upstreamed",
    "upstreamed",
    "conflict",
    "skipped",
    "resolved",
    "reinstated",
    "still upstreamed",
    "left in patches/upstreamed",
]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
LEFT = "left in patches/upstreamed"


def outcome(text: str) -> Outcome:
    if text not in OUTCOMES:
        raise ValueError(f"unknown rebase outcome {text!r}")
    return cast(Outcome, text)


@dataclass(frozen=True)
class Pin:
    tag: str
    commit: str

    def to_json(self) -> dict[str, str]:
        return {"tag": self.tag, "commit": self.commit}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Pin:
        return cls(str(data["tag"]), str(data["commit"]))


@dataclass(frozen=True)
class Item:
    """One patch of the series (or a dormant one from patches/upstreamed/), with its commit on the old release."""

    filename: str
    line: int
    dormant: bool
    dormant_tag: str | None
    path: str  # relative to the project root
    old_commit: str | None = None
    old_parent: str | None = None
    blobs: Mapping[str, str] = field(default_factory=dict)  # path -> the blob it had before the patch

    def to_json(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "line": self.line,
            "dormant": self.dormant,
            "dormant_tag": self.dormant_tag,
            "path": self.path,
            "old_commit": self.old_commit,
            "old_parent": self.old_parent,
            "blobs": dict(self.blobs),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Item:
        return cls(
            filename=data["filename"],
            line=int(data["line"]),
            dormant=bool(data["dormant"]),
            dormant_tag=data.get("dormant_tag"),
            path=data["path"],
            old_commit=data.get("old_commit"),
            old_parent=data.get("old_parent"),
            blobs=dict(data.get("blobs") or {}),
        )


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

    @classmethod
    def of(cls, item: Item, outcome: Outcome, reason: str = "", **more: Any) -> PatchResult:
        return cls(filename=item.filename, dormant=item.dormant, outcome=outcome, reason=reason, **more)

    def to_json(self) -> dict[str, Any]:
        # Sorted keys: what `patches rebase` printed when these came back from state.json as dicts.
        return {
            "commit": self.commit,
            "dormant": self.dormant,
            "dropped_hunks": [dict(d) for d in self.dropped_hunks],
            "filename": self.filename,
            "files": [dict(f) for f in self.files],
            "moves": [dict(m) for m in self.moves],
            "outcome": self.outcome,
            "parent": self.parent,
            "reason": self.reason,
            "upstreamed_checks": [dict(c) for c in self.upstreamed_checks],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PatchResult:
        return cls(
            filename=data["filename"],
            dormant=bool(data["dormant"]),
            outcome=outcome(data["outcome"]),
            reason=data.get("reason") or "",
            commit=data.get("commit"),
            parent=data.get("parent"),
            moves=tuple(data.get("moves") or ()),
            dropped_hunks=tuple(data.get("dropped_hunks") or ()),
            upstreamed_checks=tuple(data.get("upstreamed_checks") or ()),
            files=tuple(data.get("files") or ()),
        )


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
    def shown(self) -> str:
        """The outcome as the table and the JSON spell it."""
        return f"{LEFT} ({self.result.outcome})" if self.outcome == LEFT else self.outcome

    def to_json(self) -> dict[str, Any]:
        """The row of `patches rebase --json`."""
        r = self.result.to_json()
        return {
            "patch": self.filename,
            "filename": self.filename,
            "outcome": self.shown,
            "file": self.file,
            "reason": self.reason,
            "moves": r["moves"],
            "dropped_hunks": r["dropped_hunks"],
            "upstreamed_checks": r["upstreamed_checks"],
        }

    def to_report_json(self) -> dict[str, Any]:
        """The row of the review report: the whole result, the file and the range-diff."""
        return {**self.result.to_json(), "outcome": self.shown, "file": self.file, "range_diff": self.range_diff}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], result: PatchResult) -> Row:
        shown = str(data["outcome"])
        final = LEFT if shown.startswith(f"{LEFT} (") else shown
        if final not in get_args(Final):
            raise ValueError(f"unknown rebase outcome {shown!r}")
        return cls(result, cast(Final, final), file=data["file"])


@dataclass(frozen=True)
class Unresolved:
    path: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class Stopped:
    """Where a rebase stopped at a conflict: the work tree, the markers, what did apply."""

    filename: str
    work_tree: str
    patch: str  # the patch's text, saved beside the state
    conflicts: Mapping[str, tuple[int, ...]]  # path -> the lines of its conflict markers
    unresolved: tuple[Unresolved, ...]
    applied: tuple[str, ...]
    reason: str
    moves: tuple[Record, ...]
    files: tuple[Record, ...] = ()  # the carry's per-file, per-hunk outcomes (what the review's conflict report reads)

    def to_json(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "work_tree": self.work_tree,
            "patch": self.patch,
            "conflicts": {p: list(lines) for p, lines in self.conflicts.items()},
            "unresolved": [u.to_json() for u in self.unresolved],
            "applied": list(self.applied),
            "reason": self.reason,
            "moves": [dict(m) for m in self.moves],
            "files": [dict(f) for f in self.files],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stopped:
        return cls(
            filename=data["filename"],
            work_tree=data["work_tree"],
            patch=data["patch"],
            conflicts={p: tuple(lines) for p, lines in (data.get("conflicts") or {}).items()},
            unresolved=tuple(Unresolved(u["path"], u["reason"]) for u in data.get("unresolved") or ()),
            applied=tuple(data.get("applied") or ()),
            reason=data.get("reason") or "",
            moves=tuple(data.get("moves") or ()),
            files=tuple(data.get("files") or ()),
        )


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
    written: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    upstream: str = ""  # the pin that moves (its patches are the items); "" in a state from before: the first
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

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "rebase",
            "version": 1,
            "token": self.token,
            "status": self.status,
            "ref": self.ref,
            "old": self.old.to_json(),
            "onto": self.onto.to_json(),
            "today": self.today,
            "report": self.report,
            "inputs": dict(self.inputs),
            "items": [i.to_json() for i in self.items],
            "next": self.next,
            "head": self.head,
            "results": [r.to_json() for r in self.results],
            "stopped": self.stopped.to_json() if self.stopped else None,
            "upstream": self.upstream,
            "pending": list(self.pending),
            "done_before": list(self.done_before),
        }
        if self.status == "committing":
            data |= {"written": self.written, "warnings": self.warnings, "rows": [r.to_json() for r in self.rows]}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RebaseState:
        status = data["status"]
        if status not in get_args(Status):
            raise ValueError(f"unknown rebase status {status!r}")
        results = [PatchResult.from_json(r) for r in data.get("results") or ()]
        rows = [Row.from_json(r, res) for r, res in zip(data.get("rows") or (), results, strict=False)]
        return cls(
            token=data["token"],
            status=cast(Status, status),
            ref=data.get("ref") or data["onto"]["tag"],
            old=Pin.from_json(data["old"]),
            onto=Pin.from_json(data["onto"]),
            today=data["today"],
            report=data.get("report"),
            inputs=dict(data.get("inputs") or {}),
            items=[Item.from_json(i) for i in data["items"]],
            head=data["head"],
            next=int(data["next"]),
            results=results,
            stopped=Stopped.from_json(data["stopped"]) if data.get("stopped") else None,
            written=list(data.get("written") or ()),
            warnings=list(data.get("warnings") or ()),
            rows=rows,
            upstream=str(data.get("upstream") or ""),
            pending=[str(r) for r in data.get("pending") or ()],
            done_before=[str(n) for n in data.get("done_before") or ()],
        )


@dataclass(frozen=True)
class RebaseStatus:
    """`patches rebase` with no flag, and `patches status --json`'s "rebase"."""

    state: RebaseState
    work_tree: str

    def to_json(self) -> dict[str, Any]:
        s = self.state
        return {
            "status": s.status,
            "old": s.old.to_json(),
            "onto": s.onto.to_json(),
            "next": s.next,
            "stopped": s.stopped.to_json() if s.stopped else None,
            "results": [r.to_json() for r in s.results],
            "patches": len(s.items),
            "work_tree": self.work_tree,
        }
