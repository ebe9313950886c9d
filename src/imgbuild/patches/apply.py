"""Apply a stack of patches to a `Tree` in memory and report what happened; the result is a mapping of changed
paths, so a failure leaves no trace anywhere."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Protocol

from pydantic import Field

from imgbuild.patches.hunks import HunkOutcome, apply_hunks, decode, encode, split_lines
from imgbuild.patches.patchfile import FileDiff, Patch
from imgbuild.shapes import NULLABLE, derived, hidden, named

# Severity order; a patch's method is the worst of its files'.
METHODS = ("exact", "offset", "fuzz", "3way", "partly-upstreamed", "upstreamed", "conflict")


class Tree(Protocol):
    def read(self, path: str) -> bytes | None:
        """Pristine content of `path`, or None if the tree lacks it."""

    def blob(self, sha: str) -> bytes | None:
        """Any blob by id (for the original blobs of 3-way merges)."""

    def symlink_prefix(self, path: str) -> str | None:
        """The leading component of `path` that is a symlink, if any."""


Merge3 = Callable[[bytes, bytes, bytes], tuple[bytes, int]]
Blobs = Callable[[str], bytes | None]  # original blobs by id, asked before the tree (None: not known there)


@named("FileApplied")
@dataclass(frozen=True, kw_only=True)
class FileOutcome:
    path: str
    old_path: Annotated[str | None, hidden()] = None
    method: str
    reason: Annotated[str, NULLABLE] = ""
    hunks: tuple[HunkOutcome, ...] = ()


@named("PatchApplied")
@dataclass(frozen=True, kw_only=True)
class PatchOutcome:
    """One patch applied: `patch` is its file name as patches/series spells it (`.patch` included)."""

    # as printed: the file name (`filename`), else the patch's name
    shown: Annotated[str, Field(serialization_alias="patch")] = derived("")
    group: Annotated[str, NULLABLE]
    method: str
    files: tuple[FileOutcome, ...]
    patch: Annotated[str, hidden()]  # its name
    filename: Annotated[str, hidden()] = ""  # as in patches/series; the one spelling JSON uses

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown", self.filename or self.patch)

    @property
    def ok(self) -> bool:
        return self.method != "conflict"


@dataclass
class StackResult:
    outcomes: list[PatchOutcome] = field(default_factory=list)
    changed: dict[str, bytes | None] = field(default_factory=dict)  # None: deleted
    own: list[dict[str, bytes | None]] = field(default_factory=list, repr=False)  # each patch's own changes
    max_fuzz: int = 0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def add(self, outcome: PatchOutcome, own: dict[str, bytes | None]) -> None:
        """One more patch: its changes count only when it applied."""
        self.outcomes.append(outcome)
        self.own.append(own)
        if outcome.ok:
            self.changed.update(own)


def combined(methods: Sequence[str]) -> str:
    """The method of a file from its hunks', or of a patch from its files': the worst, except that what is
    partly upstreamed says so (unless fuzz or a 3-way merge did the rest)."""
    if "conflict" in methods:
        return "conflict"
    if methods and all(m == "upstreamed" for m in methods):
        return "upstreamed"
    rest = [m for m in methods if m not in ("upstreamed", "partly-upstreamed")]
    if len(rest) < len(methods):
        return "fuzz" if "fuzz" in rest else "3way" if "3way" in rest else "partly-upstreamed"
    return max(rest, key=METHODS.index) if rest else "exact"


def _apply_file(
    fd: FileDiff,
    read: Callable[[str], bytes | None],
    tree: Tree,
    max_fuzz: int,
    merge3: Merge3 | None,
    blobs: Blobs | None,
) -> tuple[FileOutcome, dict[str, bytes | None], bytes | None]:
    """Returns the outcome, the changes to make, and conflict-marked content if any; `read` sees the stack's
    changes so far."""
    src = fd.old_path
    for path in filter(None, (fd.old_path, fd.new_path)):
        link = tree.symlink_prefix(path)
        if link:
            reason = f"{link} is a symlink in the tree; refusing to follow it"
            return FileOutcome(path=fd.path, old_path=src, method="conflict", reason=reason), {}, None
    current = read(src) if src else None
    dest = fd.new_path

    if src is None:  # the patch creates a file
        wanted = encode("".join([line for h in fd.hunks for line in h.new]))
        existing = read(fd.path)
        if existing is None:
            return FileOutcome(path=fd.path, method="exact"), {fd.path: wanted}, None
        if existing == wanted:
            return (
                FileOutcome(path=fd.path, method="upstreamed", reason="the file already exists with this content"),
                {},
                None,
            )
        return (
            FileOutcome(path=fd.path, method="conflict", reason="the patch creates a file that already exists"),
            {},
            None,
        )

    if current is None:
        return (
            FileOutcome(path=fd.path, old_path=src, method="conflict", reason=f"{src} does not exist in the tree"),
            {},
            None,
        )

    result = apply_hunks(split_lines(decode(current)), fd.hunks, max_fuzz)
    if result.lines is not None:
        method = combined([h.method for h in result.hunks])
        new = encode("".join(result.lines))
        if method == "upstreamed":
            return (
                FileOutcome(
                    path=fd.path,
                    old_path=src,
                    method=method,
                    hunks=tuple(result.hunks),
                    reason="every hunk is already present",
                ),
                {},
                None,
            )
        if dest is None:
            return FileOutcome(path=fd.path, old_path=src, method=method, hunks=tuple(result.hunks)), {src: None}, None
        changes: dict[str, bytes | None] = {dest: new}
        if fd.is_rename:
            changes[src] = None
        return FileOutcome(path=fd.path, old_path=src, method=method, hunks=tuple(result.hunks)), changes, None

    # Hunks failed: a 3-way merge between the patch's original blob, the
    # patched original, and what the tree has now.
    known = blobs(fd.old_blob) if blobs is not None and fd.old_blob is not None else None
    base = known if known is not None or fd.old_blob is None else tree.blob(fd.old_blob)
    if merge3 is None or base is None or dest is None:
        why = "hunks do not apply" + ("" if base is not None else f"; original blob {fd.old_blob} is not available")
        why = fuzz_note(split_lines(decode(current)), fd, max_fuzz) or why
        return (
            FileOutcome(path=fd.path, old_path=src, method="conflict", hunks=tuple(result.hunks), reason=why),
            {},
            None,
        )
    theirs = apply_hunks(split_lines(decode(base)), fd.hunks, 0)
    if theirs.lines is None:
        why = "the patch does not apply to its own original blob (stale index line?)"
        return (
            FileOutcome(path=fd.path, old_path=src, method="conflict", hunks=tuple(result.hunks), reason=why),
            {},
            None,
        )
    merged, conflicts = merge3(current, base, encode("".join(theirs.lines)))
    if conflicts:
        why = f"3-way merge left {conflicts} conflict(s)"
        note = fuzz_note(split_lines(decode(current)), fd, max_fuzz)
        why = f"{why}; {note}" if note else why
        return (
            FileOutcome(path=fd.path, old_path=src, method="conflict", hunks=tuple(result.hunks), reason=why),
            {},
            merged,
        )
    if merged == current:
        return (
            FileOutcome(
                path=fd.path,
                old_path=src,
                method="upstreamed",
                hunks=tuple(result.hunks),
                reason="3-way merge is a no-op",
            ),
            {},
            None,
        )
    return FileOutcome(path=fd.path, old_path=src, method="3way", hunks=tuple(result.hunks)), {dest: merged}, None


MAX_FUZZ = 3
NOOP_MERGE = "3-way merge is a no-op"


def fuzz_note(lines: Sequence[str], fd: FileDiff, max_fuzz: int) -> str:
    """Say where failed hunks would land with more fuzz, and how to fix the patch instead."""
    if max_fuzz >= MAX_FUZZ:
        return ""
    probe = apply_hunks(lines, fd.hunks, MAX_FUZZ)
    if probe.lines is None:
        return ""
    fuzzy = [h for h in probe.hunks if h.method == "fuzz"]
    if not fuzzy:
        return ""
    need = max(h.fuzz for h in fuzzy)
    where = ", ".join(f"hunk #{h.hunk} `{h.header}` with fuzz {h.fuzz} at line {h.line}" for h in fuzzy)
    return (
        f"would apply with fuzz: {where}; `--allow-fuzz {need}` accepts it (never in CI), "
        "`imgbuild patches rebase` or `patches edit`/`refresh` fixes the patch properly"
    )


def apply_patch(
    patch: Patch,
    tree: Tree,
    changed: Mapping[str, bytes | None],
    *,
    max_fuzz: int = 0,
    merge3: Merge3 | None = None,
    blobs: Blobs | None = None,
) -> tuple[PatchOutcome, dict[str, bytes | None], dict[str, bytes]]:
    """Apply one patch on top of `changed`; `blobs`: original blobs by id, beside the tree's. Returns its outcome,
    its own changes and the files a 3-way merge left conflict markers in."""
    view = dict(changed)

    def read(path: str) -> bytes | None:
        return view[path] if path in view else tree.read(path)

    own: dict[str, bytes | None] = {}
    marked: dict[str, bytes] = {}
    files: list[FileOutcome] = []
    for fd in patch.files:
        outcome, changes, conflict = _apply_file(fd, read, tree, max_fuzz, merge3, blobs)
        files.append(outcome)
        own.update(changes)
        view.update(changes)
        if conflict is not None:
            marked[fd.path] = conflict
    method = combined([f.method for f in files])
    done = PatchOutcome(patch=patch.name, group=patch.group, method=method, files=tuple(files), filename=patch.filename)
    return done, own, marked


def apply_stack(
    patches: Sequence[Patch],
    tree: Tree,
    *,
    max_fuzz: int = 0,
    merge3: Merge3 | None = None,
) -> StackResult:
    """Apply `patches` in order. A patch that fails changes nothing."""
    result = StackResult(max_fuzz=max_fuzz)
    for patch in patches:
        outcome, own, _ = apply_patch(patch, tree, result.changed, max_fuzz=max_fuzz, merge3=merge3)
        result.add(outcome, own)
    return result


def derive_stack(
    full: StackResult | None,
    series: Sequence[Patch],
    keep: Sequence[str],
    tree: Tree,
    *,
    max_fuzz: int = 0,
    merge3: Merge3 | None = None,
) -> StackResult:
    """What `apply_stack` of the kept patches gives, reusing `full` (the whole series, as apply_stack ran it)
    for every kept patch whose files no left-out or re-applied patch has touched before it."""
    if full is None or len(full.own) != len(series) or full.max_fuzz != max_fuzz:
        return apply_stack([p for p in series if p.name in set(keep)], tree, max_fuzz=max_fuzz, merge3=merge3)
    kept = set(keep)
    result = StackResult(max_fuzz=max_fuzz)
    dirty: set[str] = set()  # files whose content may differ from the full run's at this point
    for patch, outcome, own in zip(series, full.outcomes, full.own, strict=True):
        if patch.name not in kept:
            dirty.update(patch.paths)
            continue
        # kept as is when its files are as in the full run and came from its hunks alone (no 3-way merge)
        merge_free = outcome.method not in ("3way", "conflict") and all(f.reason != NOOP_MERGE for f in outcome.files)
        if dirty.isdisjoint(patch.paths) and merge_free:
            result.add(outcome, own)
            continue
        again, own_again, _ = apply_patch(patch, tree, result.changed, max_fuzz=max_fuzz, merge3=merge3)
        result.add(again, own_again)
        dirty.update(patch.paths)
    return result
