"""`imgbuild patches bump`: a new vLLM release becomes one reviewed change on its own branch.

The series is rebased (rebase.start) on a new branch `imgbuild/bump-<tag>`, committed there, built and
smoke-tested (builder/runner.py), and the rebase's review report is extended (review.render_bump) into
`bump-<tag>.md`/`.json`. A conflict leaves the rebase in progress with a per-hunk report; after
`patches rebase --continue`, `patches bump` again commits and builds the finished rebase.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from imgbuild.atomic import write_json
from imgbuild.errors import ImgbuildError, StateError
from imgbuild.patches.patchfile import parse_patch
from imgbuild.project import Project
from imgbuild.upstream.git import CommitTree, GitError, GitRepo
from imgbuild.upstream.refs import resolve_ref
from imgbuild.workflows import rebase, review
from imgbuild.workflows.rebase_state import Log, Pin, RebaseStopped, load, quiet, session

if TYPE_CHECKING:
    from imgbuild.builder.runner import BuildOptions

Status = Literal["current", "carried", "conflict", "build-failed"]


@dataclass
class Bump:
    """What `patches bump` did; `error` is what stopped it (a conflict, a failed build), raised by the CLI."""

    status: Status
    message: str
    old: Pin
    onto: Pin
    branch: str | None = None
    commit: str | None = None
    built: bool = False
    images: list[dict[str, Any]] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    report: Path | None = None
    error: ImgbuildError | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.error is None,
            "status": self.status,
            "message": self.message,
            "old": self.old.to_json(),
            "onto": self.onto.to_json(),
            "branch": self.branch,
            "commit": self.commit,
            "built": self.built,
            "images": self.images,
            "patches": [
                {"patch": p.get("filename"), "kind": p.get("kind"), "outcome": p.get("outcome")} for p in self.patches
            ],
            "conflicts": self.conflicts,
            "report": (
                {"markdown": str(self.report), "json": str(self.report.with_suffix(".json"))} if self.report else None
            ),
            "error": self.error.to_json()["error"] if self.error else None,
        }


def bump(
    root: Path,
    onto: str = "latest",
    *,
    branch: str | None = None,
    build: BuildOptions | None = None,
    report_dir: Path | None = None,
    date: str | None = None,
    log: Log = quiet,
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
    if new.commit == old.commit:
        if current == name and repo.status("patches").strip():
            # the rebase this bump started, finished since by `patches rebase --continue`: commit it, build
            log(f"the rebase onto {new.tag} is finished on {name}; committing it")
            return _finish(root, repo, _pin_at_head(repo) or old, new, name, md, build, log)
        newest = "the newest release " if onto.strip() == "latest" else ""
        return Bump("current", f"already at {newest}{new.tag}", old, new)
    rebase.refuse_dirty_patches(root)  # before the branch: the rebase would refuse it there
    head = repo.verify("HEAD")
    created = _switch(repo, name, current)
    log(f"on branch {name}: rebasing from {old.tag} onto {new.tag}")
    try:
        rebase.start(root, new.tag, date=date, report=md, log=log)
    except RebaseStopped as exc:
        return _stopped(root, exc, old, new, name, md)
    except BaseException:
        if created and rebase.in_progress_message(root) is None:
            # refused before it began (nothing to resume): leave the project as it was
            repo.run("switch", "-q", *([current] if current else ["--detach", head]))
            repo.run("branch", "-q", "-D", name)
        raise
    return _finish(root, repo, old, new, name, md, build, log)


# -- the steps -----------------------------------------------------------------------------
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


def _stopped(root: Path, exc: RebaseStopped, old: Pin, new: Pin, name: str, md: Path) -> Bump:
    """The rebase stopped at a conflict: the per-hunk report; the rebase stays in progress."""
    state = load(root)
    stopped = state.stopped or exc.stopped
    item = state.current
    patch = parse_patch(root / item.path, Project.load(root).pin.package_root)
    release = CommitTree(session(root).scratch(), state.head)
    hunks = review.conflict_hunks(stopped, patch, release.read)
    text, data = review.render_conflict(state, stopped, hunks, patch.fields.get("Description", ""))
    files = sorted({h["file"] for h in hunks})
    message = (
        f"{old.tag} → {new.tag}: stopped at a conflict in {stopped.filename} "
        f"({len(hunks)} hunk(s) in {', '.join(files) or 'no file'}); resolve it, then "
        "`imgbuild patches rebase --continue` and `imgbuild patches bump`"
    )
    bump: dict[str, Any] = {"message": message, "status": "conflict", "branch": name, "commit": None, "images": []}
    text, data = review.render_bump(text, data, bump)
    _write(md, text, data)
    return Bump("conflict", message, old, new, name, None, False, [], data["patches"], hunks, md, exc)


def _finish(
    root: Path, repo: GitRepo, old: Pin, new: Pin, name: str, md: Path, build: BuildOptions | None, log: Log
) -> Bump:
    """Commit patches/ on the branch, build and smoke-test unless told not to, and write the report."""
    text, data = _review(md, old, new)
    patches = review.with_kinds(data.get("patches", ()))
    repo.stage("patches")
    lines = [f"patches: carry the series onto vLLM {new.tag} (from {old.tag})", ""]
    lines += [f"Made by `imgbuild patches bump`; the review report: {md.name}.", ""]
    lines += [f"- {p.get('filename')}: {p['kind']}" for p in patches]
    repo.run("commit", "-q", "-m", "\n".join(lines) + "\n", "--", "patches")
    commit = repo.verify("HEAD")
    log(f"committed {commit[:12]} on {name}")
    images: list[dict[str, Any]] = []
    error: ImgbuildError | None = None
    note = "not built (--no-build)"
    if build is not None:
        try:
            images = _build(root, build, log)
            note = f"built and smoke-tested {len(images)} image(s)"
        except ImgbuildError as exc:
            error, note = exc, f"the build failed: {exc.message}"
    message = f"{old.tag} → {new.tag} on branch {name} ({commit[:12]}): {review.tally(patches) or 'no patches'}; {note}"
    status: Status = "build-failed" if error else "carried"
    bump: dict[str, Any] = {"message": message, "status": status, "branch": name, "commit": commit, "images": images}
    if error is not None:
        bump["build"] = note
    text, data = review.render_bump(text, {**data, "patches": patches}, bump)
    _write(md, text, data)
    return Bump(status, message, old, new, name, commit, bool(images), images, patches, [], md, error)


def _review(md: Path, old: Pin, new: Pin) -> tuple[str, dict[str, Any]]:
    """The rebase's review report (the rebase wrote it where the bump asked)."""
    js = md.with_suffix(".json")
    if md.is_file() and js.is_file():
        import json

        data = json.loads(js.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("onto", {}).get("commit") == new.commit and "stopped" not in data:
            return md.read_text(encoding="utf-8"), data
    text = (
        f"# Rebase of the patch series: {old.tag} → {new.tag}\n\n(the rebase's review report was not found at {md})\n"
    )
    return text, {"old": old.to_json(), "onto": new.to_json(), "patches": [], "warnings": []}


def _build(root: Path, options: BuildOptions, log: Log) -> list[dict[str, Any]]:
    """Every variant built and smoke-tested, as `imgbuild build` does (builder/runner.py)."""
    from imgbuild.builder import runner
    from imgbuild.engine import Engine

    project = Project.load(root)
    project.refuse_bad_headers()
    result = runner.build(Engine.connect(), project, project.select(None, None), options, say=log)
    return [_image(i.to_json()) for i in result.images]


def _image(i: Mapping[str, Any]) -> dict[str, Any]:
    smoke = i.get("smoke") or {}
    return {
        "variant": i["variant"],
        "platform": i["platform"],
        "image_id": i["image_id"],
        "immutable": i["immutable"],
        "moving": i["moving"],
        "index": i.get("index"),
        "smoke": "passed" if smoke.get("ok") else ("not run" if not smoke else "failed"),
    }


def _write(md: Path, text: str, data: dict[str, Any]) -> None:
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text, encoding="utf-8")
    write_json(md.with_suffix(".json"), data)
