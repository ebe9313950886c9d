"""Parse one patch file: a DEP-3 header, then a git-style diff. Parsing also refuses, naming the file and the line,
what must never touch a tree: paths outside the package root, symlinks, binary diffs, abbreviated `index` lines."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any

from unidiff import PatchedFile, PatchSet  # type: ignore[attr-defined]
from unidiff.errors import UnidiffParseError

from imgbuild.errors import PatchError, unknown_name

INDEX_RE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: ([0-7]{6}))?$")
SYMLINK_MODE_RE = re.compile(r"^(new file mode|new mode|old mode|deleted file mode) 120000$")
HUNK_LINE = (" ", "+", "-", "@", "\\")  # how hunk, ---/+++ and @@ lines start: no refused line starts so
FIELD_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s?(.*)$")
ZERO = "0" * 40
REQUIRED_FIELDS = ("Description", "Author", "Upstream-Status", "Last-Update", "Group")


@dataclass(frozen=True)
class Hunk:
    index: int  # 1-based within its file
    header: str  # the "@@ -a,b +c,d @@ ..." line
    old_start: int  # 1-based line in the pre-image
    new_start: int
    old: tuple[str, ...]  # context + removed lines, with their line endings
    new: tuple[str, ...]  # context + added lines
    lead: int  # leading context lines
    trail: int  # trailing context lines
    line: int  # line of the @@ header in the patch file


@dataclass(frozen=True)
class FileDiff:
    old_path: str | None  # None: the patch creates the file
    new_path: str | None  # None: the patch deletes the file
    old_blob: str | None
    new_blob: str | None
    hunks: tuple[Hunk, ...]
    line: int  # line of "diff --git" in the patch file

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def is_rename(self) -> bool:
        return self.old_path is not None and self.new_path is not None and self.old_path != self.new_path


@dataclass(frozen=True)
class Patch:
    name: str  # file stem, used everywhere to refer to the patch
    filename: str
    header: str  # everything before the first "diff --git", kept byte for byte
    fields: dict[str, str]
    files: tuple[FileDiff, ...]
    sha256: str  # of the whole patch file
    upstream: str = ""  # the pin it applies to (DEP-3 `Upstream:`, default the first pin); "" when not known

    @property
    def group(self) -> str:
        return self.fields.get("Group", "").strip()

    @property
    def description(self) -> str:
        return self.fields.get("Description", "").splitlines()[0] if self.fields.get("Description") else ""

    @cached_property  # asked for in every planner loop; a Patch never changes
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for f in self.files for p in (f.old_path, f.new_path) if p))


def parse_header(header: str) -> dict[str, str]:
    """DEP-3 fields (RFC 822 style, continuation lines start with a space)."""
    fields: dict[str, str] = {}
    current: str | None = None
    for raw in header.splitlines():
        if raw.strip() == "---":
            break
        if raw.startswith((" ", "\t")) and current:
            cont = raw[1:]
            fields[current] += "\n" + ("" if cont.strip() == "." else cont)
            continue
        m = FIELD_RE.match(raw)
        if m:
            current = m.group(1)
            fields[current] = m.group(2)
        else:
            current = None
    return fields


def _check_path(patch: str, path: str, line: int, package_root: str) -> None:
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise PatchError(
            f"{patch}:{line}: absolute path {path!r} is refused", hint="paths must be relative, like a/vllm/x.py"
        )
    if ".." in pure.parts:
        raise PatchError(f"{patch}:{line}: path {path!r} escapes the tree ('..')", hint="remove the '..' component")
    if not pure.parts or pure.parts[0] != package_root:
        raise PatchError(
            f"{patch}:{line}: {path!r} is outside the package root {package_root}/",
            hint=f"patches may only touch files under {package_root}/",
        )


def _header_paths(line: str) -> list[str]:
    """Paths named by one line of a file's diff header."""
    if line.startswith("diff --git "):
        rest = line[len("diff --git ") :]
        # "a/X b/Y": split on the " b/" that starts the second path
        cut = rest.find(" b/")
        if rest.startswith("a/") and cut > 0:
            return [rest[2:cut], rest[cut + 3 :]]
        return [rest]
    for key, prefix in (("--- ", "a/"), ("+++ ", "b/")):
        if line.startswith(key):
            target = line[len(key) :].split("\t", 1)[0]
            return [] if target == "/dev/null" else [target.removeprefix(prefix)]
    for key in ("rename from ", "rename to ", "copy from ", "copy to "):
        if line.startswith(key):
            return [line[len(key) :]]
    return []


def _hunk_from(h: Any, index: int, first_line: int) -> Hunk:
    old: list[str] = []
    new: list[str] = []
    kinds: list[str] = []
    lines = list(h)
    for i, ln in enumerate(lines):
        if ln.line_type == "\\":
            continue
        value = ln.value
        if i + 1 < len(lines) and lines[i + 1].line_type == "\\":
            value = value.removesuffix("\n").removesuffix("\r")
        if ln.line_type in (" ", "-"):
            old.append(value)
        if ln.line_type in (" ", "+"):
            new.append(value)
        kinds.append(ln.line_type)
    lead = next((i for i, k in enumerate(kinds) if k != " "), len(kinds))
    trail = next((i for i, k in enumerate(reversed(kinds)) if k != " "), len(kinds))
    diff_line = min((ln.diff_line_no for ln in lines if ln.diff_line_no), default=1) - 1
    return Hunk(
        index=index,
        header=f"@@ -{h.source_start},{h.source_length} +{h.target_start},{h.target_length} @@",
        old_start=h.source_start,
        new_start=h.target_start,
        old=tuple(old),
        new=tuple(new),
        lead=lead,
        trail=trail,
        line=first_line + diff_line - 1,
    )


STRUCTURE = ("diff --git ", "index ", "--- ", "+++ ", "@@ ")
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _check_line_ends(name: str, diff: str, first: int) -> None:
    """A patch saved with CRLF ends breaks every header line; say so instead of 'missing index line'."""
    for i, line in enumerate(diff.split("\n"), start=first):
        if line.endswith("\r") and line.startswith(STRUCTURE):
            raise PatchError(
                f"{name}:{i}: the patch file has CRLF (Windows) line endings",
                hint=f"convert it back to LF: `sed -i 's/\\r$//' patches/{name}` (or dos2unix), "
                "or regenerate it with `git diff --full-index`",
            )


def _check_hunk_lengths(name: str, diff: str, first: int) -> None:
    """Each hunk must hold as many lines as its @@ header says; unlike unidiff's error, this one names the hunk,
    its line and the count that is wrong."""
    lines = diff.split("\n")
    path, number, i = "", 0, 0
    while i < len(lines):
        if lines[i].startswith("diff --git "):
            path, number = _header_paths(lines[i])[-1], 0
        m = HUNK_RE.match(lines[i])
        if not m:
            i += 1
            continue
        number += 1
        header_at, header = i, lines[i].rstrip("\r")
        want = (int(m.group(2) or 1), int(m.group(4) or 1))
        i, found, cut = hunk_body(lines, i + 1, want)
        if found == want:
            continue
        longer = found[0] >= want[0] and found[1] >= want[1]
        shorter = found[0] <= want[0] and found[1] <= want[1]
        size = "longer than" if longer else "shorter than" if shorter else "not the size"
        counts = "; ".join(
            f"{what} lines ({kind}): the header says {w}, the body has {f}"
            for what, kind, w, f in (
                ("old", "context and -", want[0], found[0]),
                ("new", "context and +", want[1], found[1]),
            )
            if w != f
        )
        end = "" if longer else " before the end of the file" if cut else f" before line {first + i}"
        raise PatchError(
            f"{name}:{first + header_at}: {path}: hunk #{number} `{header}` is {size} its header says: {counts}{end}",
            hint=f"fix the counts in the @@ line at line {first + header_at} (or the body under it), "
            "or regenerate the patch with `git diff --full-index`; a patch edited by hand keeps its old counts",
        )


def hunk_body(lines: list[str], i: int, want: tuple[int, int]) -> tuple[int, tuple[int, int], bool]:
    """(the index after the hunk body at `lines[i]`, its (old, new) counts, whether the file ended); counting goes
    on past the header's counts while body lines follow, so that a wrong count can be reported."""
    old = new = 0
    while i < len(lines):
        line = lines[i]
        complete = old >= want[0] and new >= want[1]
        kind = line[:1]
        if kind == "" and (complete or i == len(lines) - 1):
            break  # the end of the file, not an empty context line
        if complete and (line.rstrip("\r") == "--" or line.startswith("-- ")):
            break
        if kind in (" ", ""):
            old, new = old + 1, new + 1
        elif kind == "-":
            old += 1
        elif kind == "+":
            new += 1
        elif kind != "\\":
            break
        i += 1
    return i, (old, new), i >= len(lines) - 1


# Where a patch may write: one package root, or the project's pins (name -> package root, the first the
# default), of which the patch's DEP-3 `Upstream:` field picks one.
Roots = str | Mapping[str, str]


def upstream_of(name: str, header: str, roots: Roots) -> tuple[str, str]:
    """(the pin's name, its package root) a patch with `header` applies to; PatchError naming the line
    of an `Upstream:` that names no pin."""
    value = parse_header(header).get("Upstream", "").strip()
    if isinstance(roots, str):
        return value, roots
    if not value:
        first = next(iter(roots))
        return first, roots[first]
    if value not in roots:
        line = next((i for i, ln in enumerate(header.splitlines(), start=1) if ln.startswith("Upstream:")), 1)
        raise PatchError(
            f"{name}:{line}: Upstream: " + unknown_name("upstream", value, roots),
            hint="name a pin of patches/upstream.yaml (its `name:`, or one under `also:`), or drop the line "
            "for the first pin",
        )
    return value, roots[value]


def parse_patch(path: Path, package_root: Roots = "vllm") -> Patch:
    """Read and check a patch file; `package_root`: where it may write (with the pins: the one `Upstream:` names)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise PatchError(f"{path}: patch file not found", hint="check patches/series") from exc
    return parse_bytes(path.name, raw, package_root)


def parse_bytes(name: str, raw: bytes, package_root: Roots = "vllm") -> Patch:
    """`parse_patch` of the bytes of the patch file `name` (a patch made in memory is never written to parse it)."""
    if b"\0" in raw:
        raise PatchError(f"{name}: binary data in the patch file", hint="binary patches are refused")
    header, diff = _split(name, raw.decode("utf-8", errors="surrogateescape"))
    upstream, package_root = upstream_of(name, header, package_root)
    first = header.count("\n") + 1  # the file's line number of the diff's first line
    _check_line_ends(name, diff, first)
    _check_hunk_lengths(name, diff, first)
    _check_lines(name, diff, first, package_root)
    files = _file_diffs(name, diff, first)
    return Patch(
        name=name.removesuffix(".patch").removesuffix(".diff"),
        filename=name,
        header=header,
        fields=parse_header(header),
        files=tuple(files),
        sha256=hashlib.sha256(raw).hexdigest(),
        upstream=upstream,
    )


def header_of(name: str, raw: bytes) -> str:
    """The DEP-3 header of a patch file's bytes (everything before its first `diff --git `)."""
    return _split(name, raw.decode("utf-8", errors="surrogateescape"))[0]


def _split(name: str, text: str) -> tuple[str, str]:
    """(the DEP-3 header, the diff): the diff starts at the first line that starts with `diff --git `."""
    start = text.find("diff --git ")
    while start > 0 and text[start - 1] != "\n":
        start = text.find("diff --git ", start + 1)
    if start < 0:
        raise PatchError(f"{name}: no 'diff --git' section found", hint="write the diff with `git diff --full-index`")
    return text[:start], text[start:]


def _check_lines(name: str, diff: str, first: int, package_root: str) -> None:
    """Refuse, by file:line, what unidiff would accept: unsafe paths, binaries, symlinks, short index lines."""
    in_file_header = False
    for i, line in enumerate(diff.splitlines(), start=first):
        if line.startswith("diff --git "):
            in_file_header = True
        elif line.startswith("@@"):
            in_file_header = False
        if in_file_header:
            for named in _header_paths(line):
                _check_path(name, named, i, package_root)
        _check_line(name, line, i)


def _check_line(name: str, line: str, i: int) -> None:
    if line[:1] in HUNK_LINE:
        return  # what follows can only match the start of a header line
    if line.startswith("GIT binary patch") or (line.startswith("Binary files ") and line.endswith(" differ")):
        raise PatchError(f"{name}:{i}: binary diff is refused", hint="patches may only change text files")
    m = INDEX_RE.match(line)
    if SYMLINK_MODE_RE.match(line) or (m and m.group(3) == "120000"):
        raise PatchError(f"{name}:{i}: symlink is refused", hint="patches may not create or change symlinks")
    if m and (len(m.group(1)) != 40 or len(m.group(2)) != 40):
        raise PatchError(
            f"{name}:{i}: abbreviated index line {line!r}",
            hint="regenerate the diff with `git diff --full-index` so 3-way merges can find the original blobs",
        )


def _file_diffs(name: str, diff: str, first: int) -> list[FileDiff]:
    try:
        patchset = PatchSet(diff)
    except UnidiffParseError as exc:
        raise PatchError(f"{name}: malformed diff: {exc}", hint="regenerate it with `git diff --full-index`") from exc
    starts = [i for i, ln in enumerate(diff.splitlines(), start=first) if ln.startswith("diff --git ")]
    files = [
        _file_diff(name, pf, starts[pos] if pos < len(starts) else first, first) for pos, pf in enumerate(patchset)
    ]
    if not files:
        raise PatchError(f"{name}: the diff changes no file")
    return files


def _file_diff(name: str, pf: PatchedFile, at_line: int, first: int) -> FileDiff:
    """One file of the diff, starting at line `at_line` of the patch file."""
    old_blob = new_blob = None
    for info in pf.patch_info or ():
        m = INDEX_RE.match(info.rstrip("\n"))
        if m:
            old_blob, new_blob = m.group(1), m.group(2)
    # Created or deleted only as git writes it (/dev/null, or the mode line): unidiff's own test also calls a
    # single `@@ -0,0` hunk a new file, which is how a diff fills an empty file (an empty __init__.py).
    modes = "".join(pf.patch_info or ())
    added = pf.source_file == "/dev/null" or "\nnew file mode" in f"\n{modes}"
    removed = pf.target_file == "/dev/null" or "\ndeleted file mode" in f"\n{modes}"
    old_path = None if added else pf.source_file.removeprefix("a/")
    new_path = None if removed else pf.target_file.removeprefix("b/")
    if old_blob is None and len(pf):
        raise PatchError(
            f"{name}:{at_line}: {pf.path}: missing 'index' line",
            hint="regenerate the diff with `git diff --full-index`",
        )
    return FileDiff(
        old_path=old_path,
        new_path=new_path,
        old_blob=None if old_blob == ZERO else old_blob,
        new_blob=None if new_blob == ZERO else new_blob,
        hunks=tuple(_hunk_from(h, i, first) for i, h in enumerate(pf, start=1)),
        line=at_line,
    )


def refused_fields(patch: Patch) -> list[str]:
    """DEP-3 fields without which `patches check` and `build` refuse a patch (Yocto's patch-status rule)."""
    missing = [] if patch.fields.get("Description", "").strip() else ["Description"]
    if not (patch.fields.get("Upstream-Status", "").strip() or patch.fields.get("Forwarded", "").strip()):
        missing.append("Upstream-Status or Forwarded")
    return missing


def missing_fields(patch: Patch) -> list[str]:
    """DEP-3 fields this project requires that the header lacks."""
    missing = [f for f in REQUIRED_FIELDS if not patch.fields.get(f, "").strip()]
    if not (patch.fields.get("Origin") or patch.fields.get("Forwarded")):
        missing.append("Origin or Forwarded")
    return missing
