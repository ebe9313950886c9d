"""`imgbuild patches import SOURCE`: an upstream fix as a new patch of the series, written only if the whole
series still applies with it.

1. Read the change: a .patch/.diff file (git's, or `diff -ruN` of two release trees), a `git format-patch` mbox,
   a commit of a local git clone, or a GitHub pull request or commit URL (its `.patch`, downloaded).
2. Rewrite its paths to the pin's package root (`a/vllm/x.py`, `vllm-0.34.0/vllm/x.py` -> `vllm/x.py`); files
   outside it (tests, docs, kernels' sources) are not in the image and are left out, and named.
3. Apply it where it goes in the series (`--after`; default: the end) on the pin with the patches before it:
   exact, at an offset, or a 3-way merge from the source's original blobs (a git clone gives them); never fuzz.
   A change the pin already has is refused as `upstreamed`; one that does not apply as a conflict.
4. Make its diff against that tree (`git diff --full-index`: right paths and line numbers), put a DEP-3 header on
   it, check the whole series with it (every patch exact or offset, every variant), and only then write the patch
   and its series line in one step.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal, cast

from pydantic import Field

from imgbuild.errors import ApplyError, PatchError, UpstreamError, UsageError
from imgbuild.patches import backport
from imgbuild.patches.apply import apply_patch, apply_stack
from imgbuild.patches.backport import Change, GitDiff
from imgbuild.patches.hunks import decode, encode
from imgbuild.patches.patchfile import Patch, parse_bytes
from imgbuild.patches.series import SeriesEntry
from imgbuild.project import Project, merge3
from imgbuild.shapes import dump, named
from imgbuild.upstream.commits import commit_files, diff_commits, init_scratch
from imgbuild.upstream.git import DIFF_FLAGS, LITERAL, GitError, GitRepo
from imgbuild.workflows.checkstack import CLEAN, check_series
from imgbuild.workflows.rebase.control import refuse_if_busy
from imgbuild.workflows.workspace import Session, work_root
from imgbuild.workflows.writeback import Journal, today

FETCH_TIMEOUT = 20.0
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class Upstreamed(PatchError):
    """The pinned release already has the change (`--json`: `error.outcome` is "upstreamed"); nothing written."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint, details={"outcome": "upstreamed"})


@dataclass(frozen=True)
class Source:
    kind: str  # patch | mbox | git | github
    change: Change
    blobs: dict[str, bytes] = field(default_factory=dict)  # the change's original blobs (a git clone has them)


Outcome = Literal["exact", "offset", "3way", "partly-upstreamed"]  # how an imported patch applied where it goes
Kind = Literal["patch", "mbox", "git", "github"]  # what it was imported from


@named("SeriesEntry")
@dataclass(frozen=True)
class SeriesChecked:  # a patch of the series checked with the imported one, and how it applied
    patch: str
    method: str


@dataclass(kw_only=True)
class Imported:
    """A patch imported (or, `--dry-run`, that would be) and the series checked with it."""

    ok: Literal[True] = True
    filename: str
    after: Annotated[str | None, Field(description="the series entry it follows (null: first)")]
    outcome: Annotated[
        Literal["exact", "offset", "3way", "partly-upstreamed"],
        Field(description="how the source applied where it goes"),
    ]
    source: str
    kind: Kind
    left_out: Annotated[list[str], Field(description="files the source changes outside the package root")]
    series: list[SeriesChecked]  # every patch of the checked series and how it applied
    variants: Annotated[list[str], Field(description="the variants that carry the new patch")]
    written: Annotated[list[str], Field(description="empty with --dry-run")] = field(default_factory=list)
    text: Annotated[str, Field(serialization_alias="patch", description="the patch file's text")]


# -- reading a source ------------------------------------------------------------------
def fetch(url: str, timeout: float = FETCH_TIMEOUT) -> str:
    """GET `url` as text; a host that cannot be reached is one error naming the file to download by hand."""
    host = re.sub(r"^[a-z]+://", "", url).split("/", 1)[0]
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data: bytes = resp.read()
    except urllib.error.HTTPError as exc:
        raise UpstreamError(
            f"{url}: the server answered {exc.code} {exc.reason}",
            hint="check the PR or commit number; download the .patch by hand where you can see it, then "
            "`imgbuild patches import FILE`",
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise UpstreamError(
            f"cannot reach {host} to download {url} ({getattr(exc, 'reason', exc)})",
            hint=f"download {url} where {host} is reachable (`curl -fLO {url}`), copy it here, then run "
            f"`imgbuild patches import {url.rsplit('/', 1)[-1]}`",
        ) from exc
    return decode(data)


def _from_text(text: str, where: str, kind: str, origin: str | None = None, bug: str | None = None) -> Source:
    changes = backport.parse_mbox(text, origin or where)
    if changes:
        first = changes[0]
        body = first.body if len(changes) == 1 else "\n".join(f"- {c.subject}" for c in changes)
        diff = "".join(c.diff if c.diff.endswith("\n") else c.diff + "\n" for c in changes)
        if len(changes) > 1:  # the commits of a PR, one after the other: each applies on the one before
            raise UsageError(
                f"{where}: {len(changes)} commits; import them one at a time (or their squashed diff)",
                hint="`git format-patch -1 REV` makes one; GitHub's .../pull/N.diff is the PR squashed",
            )
        change = replace(first, body=body, diff=diff, origin=origin or first.origin, bug=bug or first.bug)
        return Source("mbox" if kind == "patch" else kind, change)
    head, diff = backport.split_plain(text)
    if not diff.strip():
        raise UsageError(f"{where}: no diff found", hint="give a .patch/.diff file, an mbox, a commit or a GitHub URL")
    fields = _dep3(head)
    desc = fields.get("Description") or fields.get("Subject") or ""
    subject, _, body = desc.partition("\n")
    author = fields.get("Author") or fields.get("From") or ""
    origin = origin or fields.get("Origin", "").removeprefix("upstream,").strip()
    return Source(kind, Change(subject.strip(), body, author, origin, bug, diff))


def _dep3(head: str) -> dict[str, str]:
    from imgbuild.patches.patchfile import parse_header

    return {k: v.strip() for k, v in parse_header(head).items() if v.strip()}


def _from_git(path: Path, rev: str) -> Source:
    try:
        repo = GitRepo(path)
    except GitError as exc:
        raise UsageError(f"{path}: not a git repository ({exc})", hint="give a vLLM clone with --rev") from exc
    sha = repo.resolve_commit(rev)
    if sha is None:
        raise UsageError(f"{path}: {rev!r} is not a commit there", hint="give --rev a commit id, tag or branch")
    remote = ""
    with contextlib.suppress(GitError):  # no remote: the origin is the commit id
        remote = repo.run("config", "--get", "remote.origin.url").strip()
    raw = repo.run("show", "-s", "--format=%an <%ae>%x00%B", sha)
    author, _, message = raw.partition("\0")
    subject, _, body = message.strip("\n").partition("\n")
    parents = repo.run("rev-list", "--parents", "-n", "1", sha).split()[1:]
    diff = repo.run("diff", *DIFF_FLAGS, "-U3", parents[0] if parents else EMPTY_TREE, sha, env=LITERAL)
    github = re.search(r"github\.com[:/]([^/\s]+/[^/\s]+?)(?:\.git)?/?$", remote)
    origin = f"https://github.com/{github.group(1)}/commit/{sha}" if github else sha
    pr = backport.pr_from_subject(subject)
    bug = f"https://github.com/{github.group(1) if github else backport.DEFAULT_GITHUB}/pull/{pr}" if pr else None
    blobs = {m.group(1): repo.read_blob(m.group(1)) for m in backport.FULL_INDEX_RE.finditer(diff)
             if m.group(1) != backport.ZERO}  # fmt: skip
    change = Change(subject.strip(), body.strip("\n"), author.strip(), origin, bug, diff)
    return Source("git", change, blobs)


@dataclass(frozen=True)
class Said:
    """What the user says about the change, over what the source says (a plain diff says nothing)."""

    description: str | None = None
    author: str | None = None
    origin: str | None = None


def with_said(src: Source, said: Said, where: str) -> Source:
    """`src` with the user's words; refused when the header would still lack a description, author or origin."""
    change = src.change
    if said.description:
        subject, _, body = said.description.partition("\n")
        change = replace(change, subject=subject.strip(), body=body)
    change = replace(change, author=said.author or change.author, origin=said.origin or change.origin)
    flags = (("--description", change.subject), ("--author", change.author), ("--origin", change.origin))
    missing = [flag for flag, value in flags if not value.strip()]
    if missing:
        raise UsageError(
            f"{where} does not say {', '.join(m.lstrip('-') for m in missing)}: pass {' '.join(missing)}",
            hint="a plain diff carries no commit message; --origin names where the change is upstream (a commit or "
            "PR URL, or the release that has it)",
        )
    return replace(src, change=change)


def read_source(source: str, rev: str | None) -> Source:
    gh = backport.parse_github_url(source)
    if gh is not None:
        if rev:
            raise UsageError("--rev goes with a git clone, not a GitHub URL", hint="put the commit in the URL")
        return _from_text(fetch(gh.patch_url), gh.patch_url, "github", gh.origin, gh.pull_url)
    path = Path(source)
    if path.is_dir():
        return _from_git(path, rev or "HEAD")
    if rev is not None:
        raise UsageError(f"--rev {rev}: {source} is not a directory (a git clone)")
    if not path.is_file():
        raise UsageError(
            f"{source}: no such file, git clone or GitHub URL",
            hint="give a .patch/.diff/mbox file, a vLLM clone (with --rev), or https://github.com/OWNER/REPO/pull/N",
        )
    return _from_text(decode(path.read_bytes()), source, "patch")


# -- placing it in the series ------------------------------------------------------------
def position(project: Project, after: str | None) -> int:
    """The index in the series the new patch takes (after `after`: a patch's name, file name or a unique start of
    it, e.g. 0004; default: the end)."""
    if after is None:
        return len(project.patches)
    exact = [i for i, p in enumerate(project.patches) if after in (p.name, p.filename)]
    found = exact or [i for i, p in enumerate(project.patches) if p.filename.startswith(after)]
    if len(found) == 1:
        return found[0] + 1
    raise UsageError(
        f"--after {after}: {'no such patch' if not found else 'more than one patch'} in patches/series",
        hint="name one of: " + ", ".join(p.filename for p in project.patches),
    )


def _diff_at(project: Project, before: dict[str, bytes | None], own: dict[str, bytes | None], tmp: Path) -> str:
    """`git diff --full-index` from `before` (the pin with the patches before this one) to that with `own`."""
    repo = init_scratch(tmp / "tree", project.upstream.repo.path / "objects", uuid.uuid4().hex)
    base = commit_files(repo, project.pin.commit, before, "the series before the import\n") if before else None
    start = base or project.pin.commit
    return diff_commits(repo, start, commit_files(repo, start, own, "import\n"))


def import_patch(
    root: Path,
    source: str,
    *,
    rev: str | None = None,
    name: str | None = None,
    after: str | None = None,
    group: str = backport.DEFAULT_GROUP,
    applied: str = "",
    date: str | None = None,
    said: Said | None = None,
    dry_run: bool = False,
) -> Imported:
    src = with_said(read_source(source, rev), said or Said(), source)
    project = Project.load(root)
    package_root = project.pin.package_root
    at = position(project, after)
    shaped: GitDiff = backport.as_git_diff(src.change.diff, package_root)
    if not shaped.paths:
        raise PatchError(
            f"{source}: changes no file under {package_root}/ (only {', '.join(shaped.left_out) or 'nothing'})",
            hint=f"an image carries only {package_root}/: import a change to it",
        )
    patch = parse_bytes("import.patch", encode(f"Description: import\n---\n{shaped.text}"), project.roots)
    tree = project.tree()
    earlier = apply_stack(project.patches[:at], tree)
    if not earlier.ok:
        raise ApplyError(
            f"the series does not apply to the pin before {after or 'its end'}; fix it before importing",
            hint="`imgbuild patches check` says which patch and why",
        )
    outcome, own, _ = apply_patch(patch, tree, earlier.changed, merge3=merge3, blobs=src.blobs.get)
    where = f"{project.pin.tag} ({project.pin.commit[:12]})"
    where += f" after {project.patches[at - 1].filename}" if at else ""
    if outcome.method == "upstreamed" or (outcome.ok and not own):
        raise Upstreamed(
            f"{source}: upstreamed: the pinned release {project.pin.tag} already has this change; nothing was written",
            hint="no backport is needed on this pin",
        )
    if not outcome.ok:
        reasons = "; ".join(f"{f.path}: {f.reason or f.method}" for f in outcome.files if f.method == "conflict")
        raise ApplyError(
            f"{source}: does not apply to {where}: {reasons}",
            hint="write it against the pin by hand (`imgbuild patches edit`)"
            + ("" if src.blobs else "; a git clone and --rev give a 3-way merge the original blobs"),
            details={"outcome": "conflict"},
        )
    before = {p: earlier.changed[p] for p in own if p in earlier.changed}
    with tempfile.TemporaryDirectory(prefix="imgbuild-import-") as tmp:
        diff = _diff_at(project, before, own, Path(tmp))
    filename = name or backport.next_filename([p.filename for p in project.patches], src.change.subject)
    if not filename.endswith(".patch") or "/" in filename or filename.startswith("."):
        raise UsageError(f"--name {filename!r}: give a file name ending in .patch", hint="e.g. 0009-fix-leak.patch")
    if (root / "patches" / filename).exists() or filename in [p.filename for p in project.patches]:
        raise UsageError(f"patches/{filename} already exists", hint="choose another --name")
    text = backport.render_header(src.change, group=group, date=date or today(), applied=applied) + diff
    new = parse_bytes(filename, encode(text), project.roots)
    checked = _check_with(project, new, at)
    result = Imported(
        filename=filename,
        after=project.patches[at - 1].filename if at else None,
        outcome=cast(Outcome, outcome.method),
        source=source,
        kind=cast(Kind, src.kind),
        text=text,
        left_out=list(shaped.left_out),
        series=checked[0],
        variants=checked[1],
    )
    if dry_run:
        return result
    _write(root, project, filename, text, result.after)
    result.written = [f"patches/{filename}", "patches/series"]
    return result


def _check_with(project: Project, new: Patch, at: int) -> tuple[list[SeriesChecked], list[str]]:
    """The whole series with `new` at `at`, checked like `patches check` (in memory); refused unless it passes."""
    patches = [*project.patches[:at], new, *project.patches[at:]]
    series = [SeriesEntry(p.filename, i + 1) for i, p in enumerate(patches)]
    trial = Project(project.root, project.pin, series, patches, project.variant_configs, project.pins)
    trial._resolved.update(project._resolved)  # the same pins: resolved once
    trial._pin_trees.update(project._pin_trees)
    check = check_series(trial)
    rows = [SeriesChecked(o.filename or o.patch, o.method) for o in check.full.outcomes]
    bad = [f"{r.patch}: {r.method}" for r in rows if r.method not in CLEAN]
    bad += [f"variant {n}: {e}" for n, e in check.variant_errors.items()]
    if bad:
        raise ApplyError(
            f"with {new.filename} the series no longer applies cleanly ({'; '.join(bad)}); nothing was written",
            hint="place it elsewhere (--after PATCH), or carry the later patches first (`imgbuild patches edit`)",
            details={"outcome": "series-conflict", "series": [dump(r) for r in rows]},
        )
    carried = [n for n, v in check.variants.items() if new.name in v.selected]
    return rows, carried


def _write(root: Path, project: Project, filename: str, text: str, after: str | None) -> None:
    """The patch file and its series line, in one step, under the patch-state lock."""
    session = Session(root, "import")
    with session.locked():
        refuse_if_busy(root)
        series_path = root / "patches" / "series"
        lines = series_path.read_text(encoding="utf-8").splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        index = len(lines)
        if after is not None:
            index = next(i + 1 for i, ln in enumerate(lines) if ln.split("#", 1)[0].split() and ln.split()[0] == after)
        elif project.patches:  # first in the series: before the first entry
            index = next(i for i, ln in enumerate(lines) if ln.split("#", 1)[0].split())
        lines.insert(index, f"{filename}\n")
        journal = Journal(root, work_root(root) / "import-txn")
        journal.write(f"patches/{filename}", encode(text))
        journal.write("patches/series", "".join(lines).encode())
        journal.prepare()
        journal.apply()
        journal.discard()
