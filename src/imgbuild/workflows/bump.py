"""`imgbuild patches bump`: a new vLLM release becomes one reviewed change on its own branch.

The series is rebased (rebase.start) on a new branch `imgbuild/bump-<tag>`, committed there, built and
smoke-tested (builder/runner.py), and the rebase's review report is extended (review.render_bump) into
`bump-<tag>.md`/`.json`. A conflict leaves the rebase in progress with a per-hunk report; after
`patches rebase --continue`, `patches bump` again commits and builds the finished rebase.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import Field, TypeAdapter

from imgbuild.atomic import write_json, write_text
from imgbuild.config.models import PinRelease, PinsFile, ShownOverride, UpstreamPin, WheelSource
from imgbuild.errors import ImgbuildError, StateError, UpstreamError
from imgbuild.patches.patchfile import parse_patch
from imgbuild.progress import Say, quiet
from imgbuild.project import Project
from imgbuild.shapes import Failure, dump, omitted_unless_set
from imgbuild.upstream.git import CommitTree, GitError, GitRepo
from imgbuild.upstream.refs import index_versions, resolve_ref
from imgbuild.upstream.requires import PinMove, PlannedMove, Unmet, plan_moves
from imgbuild.workflows.rebase import control as rebase
from imgbuild.workflows.rebase import review
from imgbuild.workflows.rebase.carry_preview import PendingShown
from imgbuild.workflows.rebase.state import Pin, RebaseStopped, load, moving_pin, session
from imgbuild.workflows.writeback import drop_override

if TYPE_CHECKING:
    from imgbuild.builder.options import BuildOptions
    from imgbuild.builder.result import ImageBuilt

Status = Literal["current", "carried", "conflict", "build-failed"]
Smoked = Literal["passed", "failed", "not run"]


@dataclass(frozen=True)
class BumpImage:
    """An image the bump built and smoke-tested."""

    variant: str
    platform: str
    image_id: str
    immutable: str
    moving: list[str]
    index: str | None
    smoke: Smoked

    @classmethod
    def of(cls, i: ImageBuilt) -> BumpImage:
        smoke: Smoked = "not run" if i.smoke is None else ("passed" if i.smoke.ok else "failed")
        return cls(i.variant, str(i.platform), i.image_id, i.immutable, list(i.moving), i.index or None, smoke)


@dataclass(frozen=True)
class BumpPatch:
    patch: str | None
    kind: str | None
    outcome: str | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> BumpPatch:
        """A patch's row of the review report (`review.with_kinds`), as the bump prints it."""
        return cls(row.get("filename"), row.get("kind"), row.get("outcome"))


@dataclass(frozen=True)
class PinMoved:
    """When carried: a pin that moved with the bump."""

    pin: str
    old: str
    new: str
    requirements: list[str]
    override: ShownOverride | None
    override_dropped: bool
    message: str
    patches: Annotated[str | None, omitted_unless_set("the tally of its own carry, when it has patches")] = None


@dataclass(frozen=True)
class BumpReport:
    markdown: str
    json_: Annotated[str, Field(serialization_alias="json")]


@dataclass(frozen=True)
class Bumped:
    """What `patches bump --json` prints of a `Bump` (`Bump.shown`)."""

    ok: bool
    status: Status
    message: str
    old: Annotated[PinRelease, Field(description="the pin before the bump")]
    onto: Annotated[PinRelease, Field(description="the release the bump carries the series onto")]
    branch: str | None
    commit: str | None
    built: bool
    images: list[BumpImage]
    patches: list[BumpPatch]
    conflicts: Annotated[
        list[review.ConflictHunk], Field(description="at a conflict: each hunk of the patch that stopped")
    ]
    pins: Annotated[
        list[PinMoved | PlannedMove],
        Field(description="the pins that moved with the bump (a pin the new release requires at another version)"),
    ]
    pending: list[PendingShown]
    report: BumpReport | None
    error: Failure | None


@dataclass(frozen=True)
class Bump:
    """What `patches bump` did; `error` is what stopped it (a conflict, a failed build), raised by the CLI."""

    status: Status
    message: str
    old: Pin
    onto: Pin
    branch: str | None = None
    commit: str | None = None
    built: bool = False
    images: list[BumpImage] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)  # the review report's rows (`review.with_kinds`)
    conflicts: list[review.ConflictHunk] = field(default_factory=list)
    report: Path | None = None
    error: ImgbuildError | None = None
    pins: list[PinMoved | PlannedMove] = field(default_factory=list)  # carried: moved; at a stop: will move
    pending: list[PendingShown] = field(default_factory=list)  # at a stop: will each pending patch apply?

    def shown(self) -> Bumped:
        """The bump as `patches bump --json` prints it (the error as the error document's body)."""
        return Bumped(
            self.error is None,
            self.status,
            self.message,
            PinRelease(self.old.tag, self.old.commit),
            PinRelease(self.onto.tag, self.onto.commit),
            self.branch,
            self.commit,
            self.built,
            self.images,
            [BumpPatch.of(p) for p in self.patches],
            self.conflicts,
            self.pins,
            self.pending,
            BumpReport(str(self.report), str(self.report.with_suffix(".json"))) if self.report else None,
            self.error.report() if self.error else None,
        )


def bump(
    root: Path,
    onto: str = "latest",
    *,
    branch: str | None = None,
    build: BuildOptions | None = None,
    report_dir: Path | None = None,
    date: str | None = None,
    say: Say = quiet,
) -> Bump:
    """Carry the series onto `onto` on a new branch, commit it, build and smoke-test (`build` None: don't)."""
    rebase.refuse_if_busy(root)
    repo = _project_repo(root)
    project = Project.load(root)
    old = Pin(project.pin.tag, project.pin.commit)
    target = resolve_ref(project.pin, onto)
    new = Pin(target.tag, target.commit)
    name = branch or "imgbuild/bump-" + review.SAFE.sub("_", new.tag)
    md = review.report_md(root, f"bump-{new.tag}", report_dir.resolve() if report_dir else None)
    current = _current_branch(repo)
    moves: list[PinMove] = []
    if new.commit != old.commit:  # before anything changes: the pins that must move with it, or one clear error
        moves = pin_moves(project, new.tag, say)
    if new.commit == old.commit:
        if current == name and repo.status("patches").strip():
            # the rebase this bump started, finished since by `patches rebase --continue`: commit it, build
            say(f"the rebase onto {new.tag} is finished on {name}; committing it")
            return _finish(root, repo, _pin_at_head(repo) or old, new, name, md, build, say)
        newest = "the newest release " if onto.strip() == "latest" else ""
        return Bump("current", f"already at {newest}{new.tag}", old, new)
    rebase.refuse_dirty_patches(root)  # before the branch: the rebase would refuse it there
    head = repo.verify("HEAD")
    created = _switch(repo, name, current)
    say(f"on branch {name}: rebasing from {old.tag} onto {new.tag}")
    more = [f"{m.pin}={m.new}" for m in moves if m.new != m.old]
    for m in moves:
        say(m.message)
    try:
        rebase.start(root, new.tag, more=more, date=date, report=md, say=say)
    except RebaseStopped as exc:
        return _stopped(root, exc, old, new, name, md, [m.shown() for m in moves])
    except BaseException:
        if created and rebase.in_progress_message(root) is None:
            # refused before it began (nothing to resume): leave the project as it was
            repo.run("switch", "-q", *([current] if current else ["--detach", head]))
            repo.run("branch", "-q", "-D", name)
        raise
    return _finish(root, repo, old, new, name, md, build, say)


# -- the steps -----------------------------------------------------------------------------
def pin_moves(project: Project, tag: str, say: Say = quiet) -> list[PinMove]:
    """The pins that move with the first pin's move to `tag` (what the new release requires of them), asking the
    package index which versions exist; an unmet requirement is one UpstreamError, raised before anything changes."""
    found = project.needs_if_moved({project.pin.name: tag})
    for need in found:
        say(need.message)

    def versions(pin: UpstreamPin) -> list[str]:
        assert isinstance(pin.source, WheelSource)  # requires.needs reads wheel pins only
        return index_versions(pin.source)

    try:
        return plan_moves(project.pins, found, versions)
    except Unmet as exc:
        need = exc.need
        suggested = exc.versions[0] if exc.versions else "VERSION"
        raise UpstreamError(
            f"{exc}; nothing was changed",
            hint=(
                f"either wait until the package index has a {need.project} that meets {need.requirement}, or write "
                f"an override with its reason under the {need.pin} pin in patches/upstream.yaml and bump again:\n"
                f'    override:\n      requirement: "{need.requirement}"\n      version: "{suggested}"\n'
                '      reason: "...why this release instead (what was checked)"\n'
                "(see docs/configuration.md; plan, the image labels and the bump report show it)"
            ),
            details={"requirement": dump(need.shown()), "index_versions": exc.versions},
        ) from None


def _project_repo(root: Path) -> GitRepo:
    try:
        return GitRepo(root)
    except GitError as exc:
        raise StateError(
            f"{root} is not a git checkout: `patches bump` commits the rebased series on a branch",
            hint="use `imgbuild patches rebase --onto REF` outside git",
        ) from exc


def _current_branch(repo: GitRepo) -> str | None:
    try:
        return repo.run("symbolic-ref", "-q", "--short", "HEAD").strip() or None
    except GitError:
        return None  # a detached HEAD


def _switch(repo: GitRepo, name: str, current: str | None) -> bool:
    """Check out a new branch `name` at HEAD (True), or stay on it when it is already checked out (False)."""
    if current == name:
        return False
    try:
        repo.verify(f"refs/heads/{name}")
    except GitError:
        repo.run("switch", "-q", "-c", name)
        return True
    raise StateError(
        f"branch {name} already exists",
        hint=f"a bump to this release was started before: check it out (`git switch {name}`), "
        "or delete it, or pass --branch NAME",
    )


def _pin_at_head(repo: GitRepo) -> Pin | None:
    try:
        data = yaml.safe_load(repo.run("show", "HEAD:patches/upstream.yaml"))
        return Pin(str(data["tag"]), str(data["commit"]))
    except (GitError, yaml.YAMLError, KeyError, TypeError):
        return None


def _stopped(root: Path, exc: RebaseStopped, old: Pin, new: Pin, name: str, md: Path, moves: list[PlannedMove]) -> Bump:
    """The rebase stopped at a conflict: the per-hunk report; the rebase stays in progress."""
    state = load(root)
    stopped = state.stopped or exc.stopped
    item = state.current
    patch = parse_patch(root / item.path, moving_pin(root, state).package_root)
    release = CommitTree(session(root).scratch(), state.head)
    hunks = review.conflict_hunks(stopped, patch, release.read)
    text, data = review.render_conflict(state, stopped, hunks, patch.fields.get("Description", ""))
    files = sorted({h.file for h in hunks})
    pending = TypeAdapter(list[PendingShown]).validate_python(stopped.pending)  # as the carry preview dumped them
    ahead = Counter(p.kind for p in pending)
    preview = f"; still to carry: {', '.join(f'{n} {w}' for w, n in ahead.items())}" if pending else ""
    what = f"{state.upstream} " if state.upstream and state.upstream != Project.load(root).pin.name else ""
    message = (
        f"{old.tag} → {new.tag}: stopped at a conflict in {what}{stopped.filename} "
        f"({len(hunks)} hunk(s) in {', '.join(files) or 'no file'}){preview}; resolve it, then "
        "`imgbuild patches rebase --continue` and `imgbuild patches bump`"
    )
    bump: dict[str, Any] = {
        "message": message,
        "status": "conflict",
        "branch": name,
        "commit": None,
        "images": [],
        "pins": [dump(m) for m in moves],
    }
    text, data = review.render_bump(text, data, bump)
    _write(md, text, data)
    return Bump(
        "conflict", message, old, new, name, None, False, [], data["patches"], hunks, md, exc, [*moves], pending
    )


def _finish(
    root: Path, repo: GitRepo, old: Pin, new: Pin, name: str, md: Path, build: BuildOptions | None, say: Say
) -> Bump:
    """Commit patches/ on the branch, build and smoke-test unless told not to, and write the report."""
    text, data = _review(md, old, new)
    patches = review.with_kinds(data.get("patches", ()))
    dropped = _drop_stale_overrides(root, say)
    pins, text, data = _moved_pins(root, repo, text, data, dropped)
    bases = move_base_tags(root, old.tag, new.tag, say)
    repo.stage("patches", *bases)
    lines = [f"patches: carry the series onto vLLM {new.tag} (from {old.tag})", ""]
    lines += [f"Made by `imgbuild patches bump`; the review report: {md.name}.", ""]
    lines += [f"- {p.get('filename')}: {p['kind']}" for p in patches]
    lines += [f"- {p.message}" for p in pins]
    lines += [f"- {path}: image.base moves to the {new.tag} image" for path in bases]
    repo.run("commit", "-q", "-m", "\n".join(lines) + "\n", "--", "patches", *bases)
    commit = repo.verify("HEAD")
    say(f"committed {commit[:12]} on {name}")
    images: list[BumpImage] = []
    error: ImgbuildError | None = None
    note = "not built (--no-build)"
    if build is not None:
        try:
            images = _build(root, build, say)
            note = f"built and smoke-tested {len(images)} image(s)"
        except ImgbuildError as exc:
            error, note = exc, f"the build failed: {exc.message}"
    moved = "".join(f"; {p.pin} {p.old} → {p.new} ({p.patches or 'no patches'})" for p in pins)
    message = (
        f"{old.tag} → {new.tag} on branch {name} ({commit[:12]}): {review.tally(patches) or 'no patches'}{moved}; "
        f"{note}"
    )
    status: Status = "build-failed" if error else "carried"
    bump: dict[str, Any] = {
        "message": message,
        "status": status,
        "branch": name,
        "commit": commit,
        "images": [dump(i) for i in images],
        "pins": [dump(p) for p in pins],
    }
    if error is not None:
        bump["build"] = note
    text, data = review.render_bump(text, {**data, "patches": patches}, bump)
    _write(md, text, data)
    return Bump(status, message, old, new, name, commit, bool(images), images, patches, [], md, error, [*pins])


def _drop_stale_overrides(root: Path, say: Say) -> list[str]:
    """Remove each override the carried pins no longer need (the required version met, or no longer required):
    the bump that finds what was required drops the override."""
    project = Project.load(root)
    path = root / "patches" / "upstream.yaml"
    gone = []
    for pin in project.pins:
        if pin.override is None:
            continue
        mine = [n for n in project.pin_needs if n.pin == pin.name]
        if any(n.status == "overridden" for n in mine) or not all(n.ok for n in mine):
            continue  # in use, or a mismatch that `patches check` reports
        path.write_text(drop_override(path.read_text(encoding="utf-8"), pin), encoding="utf-8")
        gone.append(pin.name)
        say(f"the {pin.name} pin's override of {pin.override.requirement} is no longer needed: removed")
    return gone


def _moved_pins(
    root: Path, repo: GitRepo, text: str, data: dict[str, Any], dropped: list[str]
) -> tuple[list[PinMoved], str, dict[str, Any]]:
    """The further pins this bump moved (against HEAD's patches/upstream.yaml): what required each move, the
    override used, and that pin's own rebase report, added to the bump's report."""
    try:
        before = PinsFile.model_validate(yaml.safe_load(repo.run("show", "HEAD:patches/upstream.yaml")))
    except (GitError, yaml.YAMLError, ValueError):
        return [], text, data
    was = {p.name: p for p in before.also}
    project = Project.load(root)
    rows: list[PinMoved] = []
    extra: list[str] = []
    reports: list[dict[str, Any]] = []
    for pin in project.pins[1:]:
        old = was.get(pin.name)
        if old is None or (old.commit == pin.commit and pin.name not in dropped):
            continue
        why = [n.message for n in project.pin_needs if n.pin == pin.name]
        note = "; override dropped (no longer needed)" if pin.name in dropped else ""
        message = f"{pin.name}: {old.tag} → {pin.tag} ({'; '.join(why) or 'no requirement names it'}){note}"
        override = pin.override.shown() if pin.override else None
        row = PinMoved(pin.name, old.tag, pin.tag, why, override, pin.name in dropped, message)
        extra += ["", f"- {row.message}"]
        if pin.override:
            o = pin.override
            extra.append(f"  - override in patches/upstream.yaml: {o.requirement} → {o.version}: {o.reason}")
            extra += [f"  - {stock_line}" for stock_line in _stock_carries(project, o.requirement, o.version)]
        sub = review.report_md(root, f"rebase-{old.tag}-to-{pin.tag}")
        if old.commit != pin.commit and sub.is_file():
            body = sub.read_text(encoding="utf-8").replace("\n#", "\n###")  # its sections under this one
            extra += ["", f"### The {pin.name} patches: {old.tag} → {pin.tag}", "", *body.split("\n", 1)[1:]]
            js = sub.with_suffix(".json")
            if js.is_file():
                sub_data = json.loads(js.read_text(encoding="utf-8"))
                reports.append({"pin": pin.name, **sub_data})
                row = replace(row, patches=review.tally(sub_data.get("patches", ())))
        rows.append(row)
    if rows:
        text = text.rstrip() + "\n\n## Pins moved with it\n" + "\n".join(extra).rstrip() + "\n"
    return rows, text, {**data, "pins": [dump(r) for r in rows], "also": reports}


def _review(md: Path, old: Pin, new: Pin) -> tuple[str, dict[str, Any]]:
    """The rebase's review report (the rebase wrote it where the bump asked)."""
    js = md.with_suffix(".json")
    if md.is_file() and js.is_file():
        data = json.loads(js.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("onto", {}).get("commit") == new.commit and "stopped" not in data:
            return md.read_text(encoding="utf-8"), data
    text = (
        f"# Rebase of the patch series: {old.tag} → {new.tag}\n\n(the rebase's review report was not found at {md})\n"
    )
    return text, {"old": dump(old), "onto": dump(new), "patches": [], "warnings": []}


def _build(root: Path, options: BuildOptions, say: Say) -> list[BumpImage]:
    """Every variant built and smoke-tested, as `imgbuild build` does (builder/runner.py)."""
    from imgbuild.builder import runner
    from imgbuild.engine import Engine

    project = Project.load(root)
    project.refuse_bad_headers()
    result = runner.build(Engine.connect(), project, project.select(None, None), options, say=say)
    return [BumpImage.of(i) for i in result.images]


def _write(md: Path, text: str, data: dict[str, Any]) -> None:
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text, encoding="utf-8")
    write_json(md.with_suffix(".json"), data)


def move_base_tags(root: Path, old_tag: str, new_tag: str, say: Say) -> list[str]:
    """Each variant whose `image.base` is tagged with the old release (`vllm/vllm-openai:v0.33.0`) is rewritten
    to the new one, in place (comments kept): a stock vLLM image carries its release's files, so a base left at
    the old tag fails the drift check once the pin moves. Returns the files rewritten (relative to `root`)."""
    line = re.compile(rf"^(\s*base:\s*[\"']?[^\s\"'#@]+:){re.escape(old_tag)}([\"']?\s*(#.*)?)$", re.M)
    moved = []
    for path in sorted((root / "images").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        new = line.sub(lambda m: m.group(1) + new_tag + m.group(2), text)
        if new != text:
            write_text(path, new)
            rel = path.relative_to(root).as_posix()
            say(f"{rel}: image.base {old_tag} -> {new_tag}")
            moved.append(rel)
    return moved


def _stock_carries(project: Project, requirement: str, pinned: str) -> list[str]:
    """What the variants' stock bases carry of an overridden requirement: a stock vLLM image installs what its
    vLLM requires (requirements/cuda.txt), so the package check refuses it (docs/building-images.md)."""
    bases = sorted({c.image.base for c in project.variant_configs.values() if c.image.base})
    return [
        f"{base} carries {requirement} (what its vLLM requires), not {pinned}: a build on it stops at the "
        "package check (docs/building-images.md, The stock vLLM image)"
        for base in bases
    ]
