"""Turn commits back into patch files, and rewrite patches/ all or nothing.

A patch is re-exported only when its hunks changed (not the free text after `@@`); its header is kept
byte for byte but for Last-Update. `series` and `upstream.yaml` are edited line by line (comments and
order survive). `Journal` writes many files as one step that the next command finishes or undoes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pydantic
import yaml

from imgbuild.atomic import write_json
from imgbuild.config.models import UpstreamPin
from imgbuild.digests import sha256_file_or_none
from imgbuild.errors import ApplyError, ConfigError, StateError
from imgbuild.patches.carry import OldStep, replay_series
from imgbuild.patches.hunks import encode
from imgbuild.patches.patchfile import Patch, parse_bytes
from imgbuild.upstream.commits import commit_files, diff_commits
from imgbuild.upstream.git import CommitTree, GitRepo

LAST_UPDATE_RE = re.compile(r"^(Last-Update:[ \t]*)([^\r\n]*)", re.MULTILINE)
DORMANT_RE = re.compile(r"^#\s*upstreamed in (\S+):\s+(\S+)\s*$")


def today() -> str:
    """Today's date (UTC), or SOURCE_DATE_EPOCH's when set, for Last-Update."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = dt.datetime.fromtimestamp(int(epoch), dt.UTC) if epoch else dt.datetime.now(dt.UTC)
    return when.date().isoformat()


# -- patch content ---------------------------------------------------------------
def bump_last_update(header: str, date: str) -> str:
    return LAST_UPDATE_RE.sub(lambda m: m.group(1) + date, header, count=1)


def signature(patch: Patch) -> tuple[object, ...]:
    """What makes two diffs the same change at the same place (ignores `@@` trailing text)."""
    return tuple(
        (
            f.old_path,
            f.new_path,
            f.old_blob,
            f.new_blob,
            tuple((h.old_start, h.new_start, h.old, h.new) for h in f.hunks),
        )
        for f in patch.files
    )


def context_of(patch: Patch) -> int:
    """The -U the patch was most likely written with (3 when it cannot tell): a hunk not at line 1 has
    exactly -U lines of leading context."""
    leads = [h.lead for f in patch.files if f.old_path and f.new_path for h in f.hunks if h.old_start > 1]
    return max(leads) if leads else 3


def context_candidates(patch: Patch) -> list[int]:
    """-U values to regenerate `patch` with, most likely first."""
    edges = sorted({max(h.lead, h.trail) for f in patch.files for h in f.hunks}, reverse=True)
    return list(dict.fromkeys([context_of(patch), 3, *edges]))


def export_patch(
    repo: GitRepo,
    parent: str,
    commit: str,
    original: bytes,
    old: Patch,
    header: str,
    *,
    package_root: str,
    date: str,
    header_changed: bool = False,
) -> bytes | None:
    """New bytes for `old`'s file, its change now `parent..commit` (None: unchanged). The diff is regenerated
    with the -U that reproduces `old` when the change is the same; a changed diff bumps Last-Update."""
    first: bytes | None = None
    for context in context_candidates(old):
        diff = diff_commits(repo, parent, commit, context=context)
        if not diff:
            return None
        data = encode(header + diff)
        if signature(parse_bytes(old.filename, data, package_root)) == signature(old):
            return None if not header_changed or data == original else data
        first = first or encode(bump_last_update(header, date) + diff)
    return first


def commit_series(
    scratch: GitRepo, base: str, patches: Sequence[Patch], tag: str, message: Callable[[Patch], str]
) -> Iterator[tuple[OldStep, str, str]]:
    """Commit each patch in turn on the pinned release `base` (tagged `tag`): (its step, parent, commit).
    The series must apply there exactly or at an offset."""
    head = base
    for step in replay_series(patches, CommitTree(scratch, base)):
        if not step.outcome.ok:  # a conflict: replay_series applies without fuzz or 3-way merges
            bad = "; ".join(f"{f.path}: {f.reason or f.method}" for f in step.outcome.files if f.method == "conflict")
            raise ApplyError(
                f"{step.patch.filename} does not apply to the pinned release {tag} ({bad})",
                hint="the series must apply where it is first: run `imgbuild patches check`",
            )
        commit = commit_files(scratch, head, step.own, message(step.patch))
        yield step, head, commit
        head = commit


# -- patches/series ---------------------------------------------------------------
def _entry_name(line: str) -> str | None:
    body = line.split("#", 1)[0].strip()
    return body.split()[0] if body else None


def rewrite_series_lines(text: str, replace: Mapping[int, str | None]) -> str:
    """`text` with 1-based line N replaced by replace[N] (a line without newline, or None to delete it)."""
    lines = text.splitlines(keepends=True)
    out = []
    for number, line in enumerate(lines, start=1):
        if number not in replace:
            out.append(line)
        elif replace[number] is not None:
            end = line[len(line.rstrip("\r\n")) :] or "\n"
            out.append(f"{replace[number]}{end}")
    return "".join(out)


def reorder_series(text: str, order: Sequence[str]) -> str:
    """`text` listing exactly `order`: kept entries keep their lines, new ones follow their predecessor."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    by_name = {name: line for line in lines if (name := _entry_name(line))}
    live = [i for i, line in enumerate(lines) if _entry_name(line) in order]
    groups: dict[int, list[str]] = {i: [] for i in live}  # a kept entry's slot: its line, then the new ones after it
    head: list[str] = []  # new entries before any kept one
    slots = iter(live)
    target = head
    for name in order:
        if name in by_name:
            target = groups[next(slots)]
        target.append(by_name.get(name, f"{name}\n"))
    first = live[0] if live else len(lines)
    out: list[str] = []
    for i, line in enumerate(lines):
        if i == first:
            out += head
        out += groups.get(i, []) if _entry_name(line) else [line]
    return "".join(out + (head if first == len(lines) else []))


def dormant_markers(text: str) -> list[tuple[int, str, str]]:
    """(line, tag, filename) of each `# upstreamed in TAG: FILE` line of a series."""
    matches = ((n, DORMANT_RE.match(line)) for n, line in enumerate(text.splitlines(), start=1))
    return [(n, m.group(1), m.group(2)) for n, m in matches if m]


def dormant_line(tag: str, filename: str) -> str:
    return f"# upstreamed in {tag}: {filename}"


# -- patches/upstream.yaml ------------------------------------------------------------
def rewrite_pin(text: str, pin: UpstreamPin, values: Mapping[str, str | None], source: Mapping[str, str | None]) -> str:
    """`text` with top-level keys `values` and `source:` keys replaced in place (None removes a key)."""
    out = text
    for key, value in values.items():
        out = _set_key(out, key, value, indent="")
    for key, value in source.items():
        out = _set_key(out, key, value, indent=r"[ \t]+")
    expect = {**values, **{f"source.{k}": v for k, v in source.items()}}
    problem = ""
    try:
        check = UpstreamPin.model_validate(yaml.safe_load(out))
        if all(_get(check, k) == v for k, v in expect.items()):
            return out
    except (yaml.YAMLError, pydantic.ValidationError) as exc:  # the in-place edit broke it: full rewrite below
        problem = str(exc)
    data = pin.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.update({k: v for k, v in values.items() if v is not None})
    for k, v in source.items():
        if v is None:
            data["source"].pop(k, None)
        else:
            data["source"][k] = v
    comments = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    rewritten = comments + yaml.safe_dump(data, sort_keys=False)
    try:
        UpstreamPin.model_validate(yaml.safe_load(rewritten))
    except (yaml.YAMLError, pydantic.ValidationError) as exc:
        raise ConfigError(f"cannot rewrite patches/upstream.yaml ({problem or exc})") from exc
    return rewritten


ALSO = re.compile(r"^also:[ \t]*(#[^\r\n]*)?\r?$", re.MULTILINE)
ITEM = re.compile(r"^([ \t]*)- ")


def rewrite_pin_named(
    text: str, pin: UpstreamPin, values: Mapping[str, str | None], source: Mapping[str, str | None]
) -> str:
    """`rewrite_pin` for any pin of patches/upstream.yaml: the top-level (first) one, or the one named
    `pin.name` under `also:`, edited in place there; the other pins' lines are left as they are."""
    cut = ALSO.search(text)
    head, tail = (text[: cut.start()], text[cut.start() :]) if cut else (text, "")
    first = yaml.safe_load(head) or {}
    if not cut or first.get("name", "vllm") == pin.name:
        return rewrite_pin(head, pin, values, source) + tail
    lines = tail.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if ITEM.match(line)]
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        block = lines[start:end]
        lead = len(ITEM.match(block[0]).group(1)) + 2  # type: ignore[union-attr]
        body = [" " * lead + block[0][lead:], *block[1:]]
        dedented = "".join(line[min(lead, len(line) - len(line.lstrip(" "))) :] for line in body)
        if (yaml.safe_load(dedented) or {}).get("name") != pin.name:
            continue
        new = rewrite_pin(dedented, pin, values, source).splitlines(keepends=True)
        at = next((i for i, line in enumerate(new) if line.strip() and not line.startswith("#")), 0)
        out = [(" " * lead + line) if line.strip() else line for line in new]
        out[at] = " " * (lead - 2) + "- " + new[at]
        return head + "".join([*lines[:start], *out, *lines[end:]])
    raise ConfigError(f"patches/upstream.yaml: no pin named {pin.name!r} under also:")


def drop_override(text: str, pin: UpstreamPin) -> str:
    """patches/upstream.yaml without the `override:` block of the pin `pin.name` (its comments and other lines kept)."""

    def cut(block: str) -> str:
        lines = block.splitlines(keepends=True)
        at = next((i for i, line in enumerate(lines) if re.match(r"^override:", line)), None)
        if at is None:
            return block
        end = at + 1
        while end < len(lines) and lines[end][:1] in (" ", "\t"):
            end += 1
        return "".join(lines[:at] + lines[end:])

    cut_at = ALSO.search(text)
    head, tail = (text[: cut_at.start()], text[cut_at.start() :]) if cut_at else (text, "")
    first = yaml.safe_load(head) or {}
    if not cut_at or first.get("name", "vllm") == pin.name:
        return cut(head) + tail
    lines = tail.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if ITEM.match(line)]
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        lead = len(ITEM.match(lines[start]).group(1)) + 2  # type: ignore[union-attr]
        block = [" " * lead + lines[start][lead:], *lines[start + 1 : end]]
        dedented = [line[min(lead, len(line) - len(line.lstrip(" "))) :] for line in block]
        if (yaml.safe_load("".join(dedented)) or {}).get("name") != pin.name:
            continue
        kept = cut("".join(dedented)).splitlines(keepends=True)
        out = [(" " * lead + line) if line.strip() else line for line in kept]
        out[0] = lines[start][:lead] + kept[0]
        return head + "".join([*lines[:start], *out, *lines[end:]])
    raise ConfigError(f"patches/upstream.yaml: no pin named {pin.name!r} under also:")


def _get(pin: UpstreamPin, dotted: str) -> Any:
    obj: Any = pin
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


def _set_key(text: str, key: str, value: str | None, *, indent: str) -> str:
    pattern = re.compile(rf"^({indent}){re.escape(key)}:[^\r\n]*(\r?\n|$)", re.MULTILINE)
    if value is None:
        return pattern.sub("", text, count=1)
    rendered = yaml.safe_dump(value, default_style=None).strip()
    rendered = rendered.removesuffix("\n...").strip()
    return pattern.sub(lambda m: f"{m.group(1)}{key}: {rendered}{m.group(2)}", text, count=1)


# -- writing many files as one step -----------------------------------------------------
class Journal:
    """Stage writes and deletes under `work`, then apply them to `root` (or roll them back)."""

    def __init__(self, root: Path, work: Path) -> None:
        self.root = root
        self.work = work
        self.path = work / "journal.json"
        self.ops: list[dict[str, Any]] = []

    def write(self, dest: str, data: bytes) -> None:
        self.ops.append({"dest": dest, "data": data})

    def delete(self, dest: str) -> None:
        self.ops.append({"dest": dest, "data": None})

    @property
    def dests(self) -> list[str]:
        return [op["dest"] for op in self.ops]

    def prepare(self) -> None:
        """Stage new contents and back up old ones; after this, apply and rollback both work."""
        self.discard()
        (self.work / "staged").mkdir(parents=True)
        (self.work / "backup").mkdir(parents=True)
        record = []
        for n, op in enumerate(self.ops):
            dest = self.root / op["dest"]
            entry: dict[str, Any] = {"dest": op["dest"], "staged": None, "backup": None, "made_dirs": []}
            if op["data"] is not None:
                (self.work / "staged" / str(n)).write_bytes(op["data"])
                entry["staged"] = f"staged/{n}"
            if dest.exists():
                shutil.copy2(dest, self.work / "backup" / str(n))
                entry["backup"] = f"backup/{n}"
            missing = []
            parent = dest.parent
            while not parent.exists():
                missing.append(str(parent.relative_to(self.root)))
                parent = parent.parent
            entry["made_dirs"] = missing
            record.append(entry)
        write_json(self.path, {"ops": record})
        self.ops = record

    @classmethod
    def load(cls, root: Path, work: Path) -> Journal | None:
        journal = cls(root, work)
        if not journal.path.exists():
            return None
        journal.ops = json.loads(journal.path.read_text(encoding="utf-8"))["ops"]
        return journal

    def apply(self) -> None:
        """Move every staged file into place (idempotent: safe to run again after a crash)."""
        for entry in self.ops:
            dest = self.root / entry["dest"]
            if entry["staged"] is not None:
                staged = self.work / entry["staged"]
                if staged.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(staged, dest)
            else:
                dest.unlink(missing_ok=True)
                parent = dest.parent
                if parent.is_dir() and parent not in (self.root, self.root / "patches") and not any(parent.iterdir()):
                    parent.rmdir()  # e.g. patches/upstreamed/ once nothing is left there

    def rollback(self) -> None:
        """Put every file back as it was before `apply` started."""
        for entry in reversed(self.ops):
            dest = self.root / entry["dest"]
            if entry["backup"] is not None:
                tmp = dest.with_name(f".{dest.name}.restore")
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.work / entry["backup"], tmp)
                os.replace(tmp, dest)
            else:
                dest.unlink(missing_ok=True)
            for made in entry["made_dirs"]:
                path = self.root / made
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()

    def discard(self) -> None:
        if self.work.exists():
            shutil.rmtree(self.work)


def check_unchanged(root: Path, recorded: Mapping[str, str | None], what: str) -> None:
    """Refuse when a file imgbuild read at the start has changed since."""
    changed = [rel for rel, digest in recorded.items() if sha256_file_or_none(root / rel) != digest]
    if changed:
        raise StateError(
            f"{', '.join(sorted(changed))} changed since {what} started; imgbuild will not overwrite that work",
            hint=f"restore the file(s), or abort {what} and start again",
        )
