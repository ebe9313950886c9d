"""A variant's immutable tags in the local store, and moving its moving tags back to one of them.

`history` reads every local image labelled `imgbuild.variant=VARIANT` and keeps
the `REPO:<version>-<digest12>` tags in the variant's repository: an image
whose tag digest is its `imgbuild.inputs` label's (one platform), or a join
(a multi-platform image over those; a FROM-only join inherits a part's
labels, so its tag digest is not the label's). Inputs (release, patches,
base, `created`) come from the labels.

Labels carry no wall clock (`created` is the newest input's date), so the
order, newest first, is when this machine built each immutable tag: the
Runner appends `<cache>/history.jsonl` when it builds one; a tag built
before that record existed sorts by the engine's LastTagTime.

`rollback` moves the moving tags to an entry (default: the newest one older
than what they name now), after checking its labels say it is this
variant's and in this repository, and after a smoke test of the target (its
own labels, the variant's smoke spec) unless told not to. Selection and
the entries are pure; `read`, `record` and `move` touch the engine or the file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from imgbuild.errors import DockerError, SmokeError, UsageError
from imgbuild.plan import labels as lbl

if TYPE_CHECKING:
    from imgbuild.config.models import SmokeSpec
    from imgbuild.engine import Engine, ImageInfo
    from imgbuild.smoke.checks import SmokeReport

RECORD = "history.jsonl"
IMMUTABLE = re.compile(r"^(?P<version>[^:/]+)-(?P<digest>[0-9a-f]{12})$")
VARIANT = f"{lbl.PREFIX}variant"


@dataclass(frozen=True)
class Entry:
    """One immutable tag of a variant and what its labels say."""

    ref: str
    image_id: str
    kind: str  # "image" (one platform) or "join" (multi-platform)
    platforms: tuple[str, ...]
    version: str
    upstream_tag: str
    upstream_commit: str
    series: str
    patches: dict[str, str]
    files: dict[str, str]  # path -> state
    base_name: str
    base_digest: str | None
    created: str
    inputs: str
    built_at: str  # when this machine built it (history.jsonl), else the engine's LastTagTime
    built_at_source: str  # "record" or "last-tag-time"
    moving: tuple[str, ...] = ()  # the variant's moving tags that name this image now

    def to_json(self) -> dict[str, object]:
        return {
            "ref": self.ref,
            "image_id": self.image_id,
            "kind": self.kind,
            "platforms": list(self.platforms),
            "version": self.version,
            "upstream": {"tag": self.upstream_tag, "commit": self.upstream_commit},
            "series": self.series,
            "patches": self.patches,
            "files": self.files,
            "base": {"name": self.base_name, "digest": self.base_digest},
            "created": self.created,
            "inputs": self.inputs,
            "built_at": self.built_at,
            "built_at_source": self.built_at_source,
            "moving": list(self.moving),
        }


@dataclass(frozen=True)
class History:
    variant: str
    repository: str
    moving: tuple[str, ...]  # the variant's moving refs
    entries: tuple[Entry, ...]  # newest first
    named: dict[str, str | None] = field(default_factory=dict)  # moving ref -> image id it names now

    def current(self) -> Entry | None:
        """The entry the first moving tag names now (None: it names nothing, or no immutable tag here)."""
        for ref in self.moving:
            image_id = self.named.get(ref)
            if image_id is not None:
                return next((e for e in self.entries if e.image_id == image_id), None)
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "variant": self.variant,
            "repository": self.repository,
            "moving": {ref: self.named.get(ref) for ref in self.moving},
            "entries": [e.to_json() for e in self.entries],
        }


def _json(value: str | None, default: object) -> object:
    try:
        return json.loads(value) if value else default
    except ValueError:
        return default


def _files(value: str | None) -> dict[str, str]:
    data = _json(value, {})
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v[0]) for k, v in data.items() if isinstance(v, list) and v}


def entries(
    infos: Sequence[ImageInfo],
    repository: str,
    variant: str,
    named: Mapping[str, str | None],
    built: Mapping[str, str],
) -> list[Entry]:
    """The immutable tags of `variant` in `repository` among `infos`, newest first (pure).

    `named`: moving ref -> the image id it names; `built`: `ref id` -> when this machine built it."""
    out: list[Entry] = []
    for info in infos:
        lab = info.labels
        if lab.get(VARIANT) != variant or lbl.INPUTS not in lab:
            continue
        for ref in info.tags:
            repo, _, tag = ref.rpartition(":")
            m = IMMUTABLE.match(tag)
            if repo != repository or m is None or m["version"] != lab.get(f"{lbl.OCI}version"):
                continue
            kind = "image" if lab[lbl.INPUTS][:12] == m["digest"] else "join"
            patches = _json(lab.get(f"{lbl.PREFIX}patches"), {})
            key = f"{ref} {info.id}"
            when, source = (built[key], "record") if key in built else (info.last_tagged, "last-tag-time")
            out.append(
                Entry(
                    ref=ref,
                    image_id=info.id,
                    kind=kind,
                    platforms=(str(info.platform),),
                    version=m["version"],
                    upstream_tag=lab.get(f"{lbl.PREFIX}upstream.tag", ""),
                    upstream_commit=lab.get(f"{lbl.PREFIX}upstream.commit", ""),
                    series=lab.get(f"{lbl.PREFIX}series", ""),
                    patches={str(k): str(v) for k, v in patches.items()} if isinstance(patches, dict) else {},
                    files=_files(lab.get(f"{lbl.PREFIX}files")),
                    base_name=lab.get(f"{lbl.OCI}base.name", ""),
                    base_digest=lab.get(f"{lbl.OCI}base.digest"),
                    created=lab.get(f"{lbl.OCI}created", ""),
                    inputs=lab[lbl.INPUTS],
                    built_at=when,
                    built_at_source=source,
                    moving=tuple(r for r, i in named.items() if i == info.id),
                )
            )
    out = [_join_platforms(e, out) if e.kind == "join" else e for e in out]
    return sorted(out, key=lambda e: (_stamp(e.built_at), e.created, e.ref), reverse=True)


def _join_platforms(join: Entry, all_entries: Sequence[Entry]) -> Entry:
    """A join's platforms: those of the one-platform entries with the same release, series and files."""
    same = sorted(
        {
            p
            for e in all_entries
            if e.kind == "image"
            and (e.upstream_commit, e.series, e.patches, e.files)
            == (join.upstream_commit, join.series, join.patches, join.files)
            for p in e.platforms
        }
    )
    return Entry(**{**join.__dict__, "platforms": tuple(same) or join.platforms})


def _stamp(value: str) -> float:
    """An RFC 3339 time (nanoseconds allowed) as seconds; 0 when unknown."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?$", value.strip())
    if not m:
        return 0.0
    zone = "+00:00" if m[3] in (None, "Z") else m[3]
    base = dt.datetime.fromisoformat(m[1] + zone).timestamp()
    return base + (float("0" + m[2]) if m[2] else 0.0)


def select_target(history: History, to: str | None) -> Entry:
    """The entry a rollback moves the moving tags to (pure). `to`: a full ref or just its tag."""
    current = history.current()
    if to is not None:
        ref = full_ref(history.repository, to)
        found = next((e for e in history.entries if e.ref == ref), None)
        if found is None:
            listed = ", ".join(e.ref for e in history.entries[:6]) or "none"
            raise UsageError(
                f"--to {to}: {ref} is not an immutable tag of variant {history.variant} in {history.repository} "
                f"(present: {listed})",
                hint=f"`imgbuild history {history.variant}` lists them",
            )
        return found
    if current is None:
        raise UsageError(
            f"{', '.join(history.moving) or 'the variant'} name no immutable tag of {history.variant} in the "
            "local store, so there is no 'older' to go back to",
            hint=f"name one: imgbuild rollback {history.variant} --to TAG (`imgbuild history {history.variant}`)",
        )
    index = history.entries.index(current)
    older = [e for e in history.entries[index + 1 :] if e.kind == current.kind and e.image_id != current.image_id]
    if not older:
        raise UsageError(
            f"{current.ref} is the oldest {current.kind} of {history.variant} in the local store: nothing to roll "
            "back to",
            hint=f"`imgbuild history {history.variant}` lists what is present",
        )
    return older[0]


def check_labels(info: ImageInfo, ref: str, repository: str, variant: str) -> None:
    """Refuse an image that is not this variant's, or not in this project's repository (a UsageError)."""
    label = info.labels.get(VARIANT)
    repo = ref.rpartition(":")[0]
    problems = []
    if label != variant:
        problems.append(f"its label imgbuild.variant is {label!r}, not {variant!r}")
    if repo != repository:
        problems.append(f"it is in repository {repo!r}, not this project's {repository!r}")
    if lbl.INPUTS not in info.labels:
        problems.append("it has no imgbuild.inputs label (imgbuild did not build it)")
    if problems:
        raise UsageError(
            f"{ref} cannot be {variant}'s moving tags: " + "; ".join(problems),
            hint=f"`imgbuild history {variant}` lists the immutable tags rollback accepts",
        )


# -- the engine and the record ------------------------------------------------
def record(cache: Path, ref: str, image_id: str, when: dt.datetime | None = None) -> None:
    """Append that this machine built `ref` as `image_id` now (one line, one write)."""
    stamp = (when or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    line = json.dumps({"ref": ref, "id": image_id, "built_at": stamp}, separators=(",", ":")) + "\n"
    cache.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache / RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def recorded(cache: Path) -> dict[str, str]:
    """`ref id` -> when it was last built here; unreadable lines are skipped."""
    out: dict[str, str] = {}
    try:
        text = (cache / RECORD).read_text()
    except OSError:
        return out
    for line in text.splitlines():
        data = _json(line, None)
        if isinstance(data, dict) and {"ref", "id", "built_at"} <= data.keys():
            out[f"{data['ref']} {data['id']}"] = str(data["built_at"])
    return out


def read(engine: Engine, cache: Path, repository: str, variant: str, moving: Sequence[str]) -> History:
    infos = engine.labelled(VARIANT, variant)
    named: dict[str, str | None] = {}
    for ref in moving:
        info = engine.image(ref)
        named[ref] = info.id if info else None
    found = entries(infos, repository, variant, named, recorded(cache))
    return History(variant, repository, tuple(moving), tuple(found), named)


@dataclass(frozen=True)
class Move:
    ref: str
    before: str | None  # the immutable tag (or image id) it named, None: nothing
    before_id: str | None
    after: str
    after_id: str

    def to_json(self) -> dict[str, object]:
        return {"ref": self.ref, "from": self.before, "from_id": self.before_id, "to": self.after,
                "to_id": self.after_id}  # fmt: skip


def move(engine: Engine, history: History, target: Entry) -> list[Move]:
    """Point every moving tag at `target`; on a failure put back those already moved, then raise."""
    by_id = {e.image_id: e.ref for e in history.entries}
    moves = []
    done: list[tuple[str, str | None]] = []
    try:
        for ref in history.moving:
            before = history.named.get(ref)
            if before != target.image_id:
                engine.tag(target.image_id, ref)
                done.append((ref, before))
            moves.append(Move(ref, by_id.get(before, before) if before else None, before, target.ref, target.image_id))
    except BaseException:
        for ref, before in reversed(done):
            try:
                if before is None:
                    engine.untag(ref)
                else:
                    engine.tag(before, ref)
            except DockerError:
                pass
        raise
    return moves


@dataclass(frozen=True)
class Rollback:
    variant: str
    target: Entry
    moves: tuple[Move, ...]
    smoke: SmokeReport | None  # None: --no-smoke

    def to_json(self) -> dict[str, object]:
        return {
            "variant": self.variant,
            "target": self.target.to_json(),
            "moves": [m.to_json() for m in self.moves],
            "smoke": self.smoke.to_json() if self.smoke else None,
        }


def full_ref(repository: str, to: str) -> str:
    return to if ":" in to and "/" not in to.rpartition(":")[2] else f"{repository}:{to}"


def rollback(
    engine: Engine, history: History, to: str | None, smoke_spec: SmokeSpec | None, *, run_smoke: bool = True
) -> Rollback:
    """Check the target's labels, smoke-test it (unless `run_smoke` is off), then move the moving tags."""
    from imgbuild.smoke.checks import expected_from_labels, smoke

    if to is not None and all(e.ref != full_ref(history.repository, to) for e in history.entries):
        ref = full_ref(history.repository, to)
        info = engine.image(ref)
        if info is not None:
            check_labels(info, ref, history.repository, history.variant)
    target = select_target(history, to)
    check_labels(engine.require(target.ref), target.ref, history.repository, history.variant)
    report = None
    if run_smoke:
        info = engine.require(target.ref)
        report = smoke(engine, target.ref, expected_from_labels(info, smoke_spec))
        if not report.ok:
            raise SmokeError(
                f"{target.ref} failed its smoke test ({len(report.failures)} failing checks: "
                + "; ".join(f"{c.group} {c.name}: {c.detail}" for c in report.failures[:4])
                + f"); {', '.join(history.moving)} left unchanged",
                hint=f"`imgbuild smoke {target.ref}` for the full report; pick another with --to",
            )
    return Rollback(history.variant, target, tuple(move(engine, history, target)), report)
