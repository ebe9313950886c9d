"""The rebase's session, shared by its steps (workflows/rebase.py starts, resumes and aborts): the work
directory and lock (`session`, a workspace.Session of kind "rebase"), state.json read and saved, the
line that says a rebase is open, and what a stopped or finished rebase returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imgbuild.config.models import UpstreamPin, load_pins
from imgbuild.errors import ApplyError, StateError
from imgbuild.workflows.rebase_state import Pin, RebaseState, Row, Stopped
from imgbuild.workflows.workspace import Session

KIND = "rebase"
SKIPPED = "skipped"  # patches/skipped/: patches dropped with --skip, kept for later
BRANCH = "imgbuild-rebase"
Log = Callable[[str], None]


def session(root: Path) -> Session:
    return Session(root, KIND)


class RebaseStopped(ApplyError):
    """The rebase stopped at a conflict; the work tree holds it."""

    def __init__(self, message: str, hint: str, stopped: Stopped) -> None:
        super().__init__(message, hint, {"stopped": stopped.to_json()})
        self.stopped = stopped


@dataclass(frozen=True)
class RebaseDone:
    old: Pin
    onto: Pin
    results: list[Row]
    written: list[str] = field(default_factory=list)
    report: Path | None = None
    warnings: list[str] = field(default_factory=list)
    upstream: str = ""  # the pin that moved ("" : the first)
    earlier: list[RebaseDone] = field(default_factory=list)  # the pins rebased before it in one run

    def to_json(self) -> dict[str, object]:
        return {
            "ok": True,
            "old": self.old.to_json(),
            "onto": self.onto.to_json(),
            "patches": [r.to_json() for r in self.results],
            "written": self.written,
            "report": str(self.report) if self.report else None,
            "warnings": self.warnings,
            "upstream": self.upstream,
            "earlier": [d.to_json() for d in self.earlier],
        }


def busy_message(root: Path, state: RebaseState) -> str:
    tree = session(root).tree
    onto = state.onto.tag
    if state.status == "stopped":
        at = state.stopped.filename if state.stopped else None
        return f"a rebase onto {onto} is in progress, stopped at {at} (conflict); work tree: {tree}"
    if state.status == "committing":
        return f"a rebase onto {onto} was interrupted while writing patches/; work tree: {tree}"
    return f"a rebase onto {onto} was interrupted at patch {state.next + 1} of {len(state.items)}; work tree: {tree}"


def parse(work: Session, data: dict[str, object]) -> RebaseState:
    try:
        return RebaseState.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(
            f"{work.directory / 'state.json'} is not a rebase state this imgbuild can read ({exc})",
            hint="`imgbuild patches rebase --abort` drops it (patches/ and the pin stay as they are)",
        ) from exc


def load(root: Path) -> RebaseState:
    work = session(root)
    data = work.read()
    if data is None:
        raise StateError("no rebase is in progress", hint="start one with `imgbuild patches rebase --onto REF`")
    return parse(work, data)


def save(root: Path, state: RebaseState) -> None:
    session(root).save(state.to_json())


def moving_pin(root: Path, state: RebaseState) -> UpstreamPin:
    """The pin the rebase moves: the one its state names, else the first."""
    pins = load_pins(root / "patches" / "upstream.yaml")
    return next((p for p in pins if p.name == state.upstream), pins[0])
