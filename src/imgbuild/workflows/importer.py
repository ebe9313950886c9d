"""`imgbuild patches import SOURCE`: bring an upstream fix into the series as a backport.

1. Read the change (`read_source`): a commit of a git repository, a .patch /
   .diff file or a `git format-patch` mbox, or a GitHub PR/commit URL (its
   `.patch`, downloaded).
2. Refuse it when it touches files outside the package root.
3. Carry it onto the pinned release with the rebase rules (replay.carry_patch:
   exact, offset, then a 3-way merge from the change's original blobs; never
   fuzz). A change the pin already has is refused as upstreamed.
4. Regenerate the diff against the pin (`git diff --full-index`), put a DEP-3
   header on it, and write the patch and its series line in one step.
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
from typing import Any

from imgbuild.errors import ApplyError, PatchError, UpstreamError, UsageError
from imgbuild.patches import backport
from imgbuild.patches.backport import Change, GithubRef
from imgbuild.patches.carry import Carry, carry_patch
from imgbuild.patches.hunks import decode, encode
from imgbuild.project import Project
from imgbuild.upstream.commits import commit_files, diff_commits, init_scratch
from imgbuild.upstream.git import DIFF_FLAGS, LITERAL, GitError, GitRepo
from imgbuild.workflows.rebase import refuse_if_busy
from imgbuild.workflows.workspace import locked, work_root
from imgbuild.workflows.writeback import Journal, parse_text, today

DEFAULT_GITHUB = backport.DEFAULT_GITHUB
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
FETCH_TIMEOUT = 20.0


class AlreadyUpstream(PatchError):
    """The pinned release already has the change (`--json`: `error.outcome` is "upstreamed")."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint, details={"outcome": "upstreamed"})


@dataclass(frozen=True)
class Overrides:
    """What the user says about the change, over what the source says."""

    description: str | None = None
    author: str | None = None
    origin: str | None = None
    bug: str | None = None
    github: str = DEFAULT_GITHUB  # OWNER/REPO that PR numbers refer to


@dataclass(frozen=True)
class Source:
    change: Change
    diffs: tuple[str, ...]  # one per commit, applied in order
    blobs: dict[str, bytes]  # original blobs the source can supply (for 3-way merges)
    kind: str  # git | mbox | patch | github


@dataclass
class Imported:
    filename: str
    outcome: str
    text: str
    source: str
    kind: str
    carries: list[Carry] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "filename": self.filename,
            "outcome": self.outcome,
            "source": self.source,
            "kind": self.kind,
            "written": self.written,
            "steps": [c.to_json() for c in self.carries],
            "patch": self.text,
        }


# -- reading a source ---------------------------------------------------------------
def fetch(url: str, timeout: float = FETCH_TIMEOUT) -> str:
    """GET `url` as text; an unreachable host is one clear error."""
    host = re.sub(r"^[a-z]+://", "", url).split("/", 1)[0]
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data: bytes = resp.read()
    except urllib.error.HTTPError as exc:
        raise UpstreamError(
            f"{url}: the server answered {exc.code} {exc.reason}",
            hint="check the PR or commit number; private repositories need a downloaded .patch file",
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UpstreamError(
            f"cannot reach {host} to download {url} ({reason})",
            hint=f"download it where {host} is reachable (`curl -LO {url}`), then run `imgbuild patches import FILE`",
        ) from exc
    return data.decode("utf-8", errors="surrogateescape")


def _github_of(url: str) -> str | None:
    m = re.search(r"github\.com[:/]([^/\s]+)/([^/\s]+?)(?:\.git)?/?$", url)
    return f"{m.group(1)}/{m.group(2)}" if m else None


def _bug(pr: int | None, github: str) -> str | None:
    return f"https://github.com/{github}/pull/{pr}" if pr is not None else None


def _from_mbox(text: str, where: str, kind: str, o: Overrides, gh: GithubRef | None = None) -> Source:
    mails = backport.parse_mbox(text)
    if mails:
        first = mails[0]
        subject = first.subject
        body = first.body if len(mails) == 1 else "\n".join(f"- {m.subject}" for m in mails)
        github = f"{gh.owner}/{gh.repo}" if gh else o.github
        pr = gh.pull if gh and gh.pull is not None else backport.pr_from_subject(subject)
        origin = gh.origin if gh else (first.commit or where)
        if gh is None and first.commit and len(mails) == 1:
            origin = f"https://github.com/{github}/commit/{first.commit}"
        change = Change(subject, body, first.author, origin, _bug(pr, github), "", first.commit)
        diffs = tuple(m.diff for m in mails if m.diff)
    else:
        head, diff = backport.split_plain(text)
        fields = {k: v for k, v in _dep3(head).items() if v.strip()}
        desc = o.description or fields.get("Description", "")
        subject, _, body = desc.partition("\n")
        missing = [
            flag
            for flag, value in (("--description", subject), ("--author", o.author or fields.get("Author")),
                                ("--origin", o.origin or fields.get("Origin")))
            if not value
        ]  # fmt: skip
        if missing and diff:
            raise UsageError(
                f"{where}: a plain diff says nothing about the change; pass {', '.join(missing)}",
                hint="or import the commit itself: a git clone and --rev, or its `git format-patch` mbox",
            )
        origin = (o.origin or fields.get("Origin", "")).removeprefix("upstream,").strip()
        change = Change(subject, body, o.author or fields.get("Author", ""), origin, None, "", None)
        diffs = (diff,) if diff else ()
    if not diffs:
        raise UsageError(f"{where}: no `diff --git` found", hint="give a commit, a .patch/.diff file or an mbox")
    change = _override(change, o)
    return Source(change, diffs, {}, kind)


def _dep3(head: str) -> dict[str, str]:
    from imgbuild.patches.patchfile import parse_header

    return parse_header(head)


def _override(change: Change, o: Overrides) -> Change:
    subject, body = change.subject, change.body
    if o.description:
        subject, _, body = o.description.partition("\n")
    return replace(
        change,
        subject=subject,
        body=body,
        author=o.author or change.author,
        origin=(o.origin or change.origin).removeprefix("upstream,").strip(),
        bug=o.bug or change.bug,
    )


def _from_git(location: str, rev: str, o: Overrides, scratch: Path) -> Source:
    path = Path(location)
    try:
        if path.exists():
            repo = GitRepo(path)
            remote = ""
            with contextlib.suppress(GitError):  # no remote: the origin is the commit id
                remote = repo.run("config", "--get", "remote.origin.url").strip()
        else:
            repo = GitRepo.init_bare(scratch / "clone.git")
            repo.run("fetch", "--quiet", location, "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
            remote = location
    except GitError as exc:
        raise UpstreamError(f"{location}: cannot read the git repository ({exc})", hint="check the path or URL") from (
            exc
        )
    sha = repo.resolve_commit(rev) or repo.resolve_commit(f"origin/{rev}")
    if sha is None:
        raise UsageError(f"{location}: {rev!r} is not a commit there", hint="give --rev a commit id, tag or branch")
    raw = repo.run("show", "-s", "--format=%an <%ae>%x00%B", sha)
    author, _, message = raw.partition("\0")
    subject, _, body = message.strip("\n").partition("\n")
    parents = repo.run("rev-list", "--parents", "-n", "1", sha).split()[1:]
    diff = repo.run("diff", *DIFF_FLAGS, "-U3", parents[0] if parents else EMPTY_TREE, sha, env=LITERAL)
    github = _github_of(remote) or o.github
    origin = f"https://github.com/{github}/commit/{sha}" if _github_of(remote) else sha
    blobs = {}
    for m in re.finditer(r"^index ([0-9a-f]{40})\.\.", diff, flags=re.MULTILINE):
        if set(m.group(1)) != {"0"}:
            blobs[m.group(1)] = repo.read_blob(m.group(1))
    bug = _bug(backport.pr_from_subject(subject), github)
    change = Change(subject.strip(), body.strip("\n"), author.strip(), origin, bug, "", sha)
    return Source(_override(change, o), (diff,), blobs, "git")


def read_source(source: str, rev: str | None, o: Overrides, scratch: Path) -> Source:
    gh = backport.parse_github_url(source)
    if gh is not None:
        if rev:
            raise UsageError("--rev goes with a git repository, not a GitHub URL", hint="put the commit in the URL")
        return _from_mbox(fetch(gh.patch_url), gh.patch_url, "github", o, gh)
    path = Path(source)
    if rev is not None or path.is_dir() or re.match(r"^(file|ssh|git|https?)://", source):
        return _from_git(source, rev or "HEAD", o, scratch)
    if not path.is_file():
        raise UsageError(
            f"{source}: no such file, directory or GitHub URL",
            hint="give a git repository (with --rev), a .patch/.diff/mbox file, or a GitHub PR or commit URL",
        )
    text = decode(path.read_bytes())
    return _from_mbox(text, source, "mbox" if backport.parse_mbox(text) else "patch", o)


# -- carrying it onto the pin ----------------------------------------------------------
def _full_ids(project: Project, diff: str, blobs: dict[str, bytes]) -> str:
    """`diff` with abbreviated index ids resolved from the source's blobs or the pin's mirror."""
    short = backport.abbreviated_blobs(diff)
    if not short:
        return diff
    full: dict[str, str] = {}
    for abbrev in short:
        known = [sha for sha in blobs if sha.startswith(abbrev)]
        if len(known) == 1:
            full[abbrev] = known[0]
            continue
        try:
            found = project.upstream.repo.run("rev-parse", "--verify", "--quiet", f"{abbrev}^{{blob}}").strip()
        except GitError:
            continue
        full[abbrev] = found
    return backport.expand_index_lines(diff, full)


def _combined(carries: list[Carry]) -> str:
    outcomes = [c.outcome for c in carries]
    if "conflict" in outcomes:
        return "conflict"
    if all(o == "upstreamed" for o in outcomes):
        return "upstreamed"
    order = ["exact", "offset", "partly-upstreamed", "3way"]
    return max((o for o in outcomes if o in order), key=order.index, default="exact")


def carry_onto_pin(project: Project, source: Source) -> tuple[list[Carry], dict[str, bytes | None]]:
    """Each commit of the source carried onto the pin in order; the combined change."""
    tree = project.tree()
    changed: dict[str, bytes | None] = {}
    carries: list[Carry] = []
    for i, diff in enumerate(source.diffs, start=1):
        text = _full_ids(project, diff, source.blobs)
        patch = parse_text(f"import-{i}.patch", text, project.pin.package_root)
        carry = carry_patch(patch, tree, changed, raw=text, blobs=source.blobs, label=f"upstream {project.pin.tag}")
        carries.append(carry)
        if carry.outcome == "conflict":
            break
        changed.update(carry.changes)
    return carries, changed


def _diff_against_pin(project: Project, changed: dict[str, bytes | None], scratch: Path) -> str:
    pin = project.upstream
    repo = init_scratch(scratch / "tree", pin.repo.path / "objects", uuid.uuid4().hex)
    commit = commit_files(repo, pin.commit, changed, "backport\n")
    return diff_commits(repo, pin.commit, commit, context=3)


# -- the command -------------------------------------------------------------------------
def import_patch(
    root: Path,
    source: str,
    *,
    rev: str | None = None,
    group: str = backport.DEFAULT_GROUP,
    name: str | None = None,
    overrides: Overrides | None = None,
    date: str | None = None,
    dry_run: bool = False,
) -> Imported:
    o = overrides or Overrides()
    with tempfile.TemporaryDirectory(prefix="imgbuild-import-") as tmp:
        src = read_source(source, rev, o, Path(tmp))
        project = Project.load(root)
        root_dir = project.pin.package_root
        bad = backport.outside([p for d in src.diffs for p in backport.diff_paths(d)], root_dir)
        if bad:
            raise PatchError(
                f"{source}: the change touches files outside {root_dir}/: {', '.join(bad)}",
                hint=f"an image only carries {root_dir}/; import a commit (or a diff) of the {root_dir}/ part only, "
                f"e.g. `git format-patch -1 --stdout REV -- {root_dir}/ > fix.patch`",
            )
        _refuse_duplicate(project, src.change)
        carries, changed = carry_onto_pin(project, src)
        outcome = _combined(carries)
        pin = f"{project.pin.tag} ({project.upstream.commit[:12]})"
        if outcome == "conflict":
            bad_carry = carries[-1]
            note = "" if src.blobs else "; a git clone with --rev gives the 3-way merge its original blobs"
            raise ApplyError(
                f"{source}: does not apply to the pinned release {pin}: {bad_carry.reason or 'conflict'}",
                hint="write the change by hand against the pin (e.g. with `imgbuild patches edit`)" + note,
            )
        if outcome == "upstreamed" or not changed:
            raise AlreadyUpstream(
                f"{source}: upstreamed: the pinned release {pin} already has this change; nothing was written",
                hint="no backport is needed on this pin",
            )
        diff = _diff_against_pin(project, changed, Path(tmp))
    series = [e.filename for e in project.series]
    filename = name or backport.next_filename(series, src.change.subject)
    if not filename.endswith(".patch") or "/" in filename or filename.startswith("."):
        raise UsageError(f"--name {filename!r}: give a file name ending in .patch", hint="e.g. 0008-fix-leak.patch")
    header = backport.render_header(src.change, group=group, date=date or today())
    text = header + diff
    parse_text(filename, text, project.pin.package_root)  # the file we write must parse like any other
    result = Imported(filename, outcome, text, source, src.kind, carries)
    if dry_run:
        return result
    with locked(root):
        refuse_if_busy(root)
        target = root / "patches" / filename
        if target.exists() or filename in series:
            raise UsageError(f"{target} already exists", hint="choose another --name")
        series_path = root / "patches" / "series"
        series_text = series_path.read_text(encoding="utf-8")
        if series_text and not series_text.endswith("\n"):
            series_text += "\n"
        journal = Journal(root, work_root(root) / "import-txn")
        journal.write(f"patches/{filename}", encode(text))
        journal.write("patches/series", f"{series_text}{filename}\n".encode())
        journal.prepare()
        journal.apply()
        journal.discard()
    result.written = [f"patches/{filename}", "patches/series"]
    return result


def _refuse_duplicate(project: Project, change: Change) -> None:
    for p in project.patches:
        origin = p.fields.get("Origin", "").removeprefix("upstream,").strip()
        if origin and origin == change.origin:
            raise PatchError(
                f"{change.origin} is already in the series as {p.filename}",
                hint="remove that patch first to import it again",
            )
