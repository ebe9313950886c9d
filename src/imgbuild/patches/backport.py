"""Backports of upstream fixes (`Upstream-Status: Backport`): which patches are backports, and their
`Applied-Upstream:` field, which rebase fills once a release contains the fix; for `patches import`, what a
source (mbox, plain diff, GitHub URL) says, its diff on the pin's paths, and the DEP-3 header (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.header import decode_header, make_header
from email.parser import HeaderParser
from pathlib import PurePosixPath

from unidiff import PatchSet  # type: ignore[attr-defined]
from unidiff.errors import UnidiffParseError

from imgbuild.errors import PatchError, UsageError
from imgbuild.patches.hunks import decode, encode

APPLIED_RE = re.compile(r"^(Applied-Upstream:)[ \t]*([^\r\n]*)(\r?\n)", re.MULTILINE)


def is_backport(fields: dict[str, str]) -> bool:
    return fields.get("Upstream-Status", "").strip().lower().startswith("backport")


def set_applied_upstream(text: str, release: str) -> str:
    """`text` (a patch file) with `Applied-Upstream: <release>` in its header ('' empties it)."""
    diff = re.search(r"^diff --git ", text, flags=re.MULTILINE)
    cut = diff.start() if diff else len(text)
    head, rest = text[:cut], text[cut:]
    value = f" {release}" if release else ""
    if APPLIED_RE.search(head):
        head = APPLIED_RE.sub(lambda m: f"{m.group(1)}{value}{m.group(3)}", head, count=1)
    else:
        status = re.search(r"^Upstream-Status:[^\n]*\n", head, flags=re.MULTILINE)
        at = status.end() if status else 0
        head = head[:at] + f"Applied-Upstream:{value}\n" + head[at:]
    return head + rest


def applied_upstream_bytes(data: bytes, fields: dict[str, str], release: str) -> bytes:
    """A patch file's bytes with Applied-Upstream set, when it is a backport (else unchanged)."""
    if not is_backport(fields):
        return data
    return encode(set_applied_upstream(decode(data), release))


# -- `patches import`: what a source says, its diff made a git diff of the pin's paths, the DEP-3 header ----------
DEFAULT_GROUP = "backports"
DEFAULT_GITHUB = "vllm-project/vllm"  # the repository `(#N)` in a subject refers to
ZERO = "0" * 40
MBOX_FROM_RE = re.compile(r"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$", re.MULTILINE)
SUBJECT_PREFIX_RE = re.compile(r"^\s*\[[^\]]*PATCH[^\]]*\]\s*", re.IGNORECASE)
PR_IN_SUBJECT_RE = re.compile(r"\(#(\d+)\)\s*$")
FULL_INDEX_RE = re.compile(r"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})")


@dataclass(frozen=True)
class GithubRef:
    """A GitHub pull request or commit URL, and where its `.patch` is."""

    owner: str
    repo: str
    pull: int | None
    commit: str | None

    @property
    def origin(self) -> str:
        base = f"https://github.com/{self.owner}/{self.repo}"
        return f"{base}/commit/{self.commit}" if self.commit else f"{base}/pull/{self.pull}"

    @property
    def patch_url(self) -> str:
        return f"{self.origin}.patch"

    @property
    def pull_url(self) -> str | None:
        return f"https://github.com/{self.owner}/{self.repo}/pull/{self.pull}" if self.pull is not None else None


def parse_github_url(url: str) -> GithubRef | None:
    """The PR or commit a GitHub URL names (.../pull/N[/files|/commits/SHA], .../commit/SHA, `.patch`/`.diff`
    allowed); None when `url` is not a GitHub URL; a UsageError for a GitHub URL of something else."""
    rest = re.sub(r"^(https?://)?", "", url.strip())
    host, _, path = rest.partition("/")
    if host.lower() not in ("github.com", "www.github.com"):
        return None
    parts = re.sub(r"\.(patch|diff)$", "", path.split("?", 1)[0].split("#", 1)[0].rstrip("/")).split("/")
    if len(parts) >= 4 and parts[2] == "pull" and parts[3].isdigit():
        commit = parts[5] if len(parts) >= 6 and parts[4] == "commits" else None
        if commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            raise UsageError(f"{url}: {commit!r} is not a commit id", hint="use .../pull/N or .../commit/SHA")
        return GithubRef(parts[0], parts[1], int(parts[3]), commit)
    if len(parts) >= 4 and parts[2] == "commit" and re.fullmatch(r"[0-9a-f]{7,40}", parts[3]):
        return GithubRef(parts[0], parts[1], None, parts[3])
    raise UsageError(
        f"{url}: not a GitHub pull request or commit URL",
        hint="use https://github.com/OWNER/REPO/pull/N or https://github.com/OWNER/REPO/commit/SHA",
    )


@dataclass(frozen=True)
class Change:
    """One upstream change, whatever it came from."""

    subject: str
    body: str
    author: str  # "Name <email>"
    origin: str  # a commit or PR URL, a commit id, or where the file came from
    bug: str | None  # the PR's URL, when known
    diff: str  # a unified diff (git's or diff -u's), paths as the source wrote them


def pr_from_subject(subject: str) -> int | None:
    """The PR number of a squash-merged subject like `Fix leak (#44237)`."""
    m = PR_IN_SUBJECT_RE.search(subject)
    return int(m.group(1)) if m else None


def _decoded(value: str | None) -> str:
    return str(make_header(decode_header(value))) if value else ""


def _diff_start(text: str) -> int:
    """Where the diff of a message or file starts (`diff --git`, else the first `--- ` followed by `+++ `)."""
    for m in re.finditer(r"^(diff --git |--- )", text, flags=re.MULTILINE):
        if m.group(1) == "diff --git " or text[m.end() :].split("\n", 1)[-1].startswith("+++ "):
            return m.start()
    return -1


def parse_mbox(text: str, where: str, github: str = DEFAULT_GITHUB) -> list[Change]:
    """The commits of a `git format-patch` mbox ([] when `text` is not one)."""
    starts = [m.start() for m in MBOX_FROM_RE.finditer(text)]
    out = []
    for i, start in enumerate(starts):
        chunk = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)]
        first, _, rest = chunk.partition("\n")
        head, _, payload = rest.partition("\n\n")
        headers = HeaderParser().parsestr(head + "\n")
        subject = SUBJECT_PREFIX_RE.sub("", _decoded(headers.get("Subject")).replace("\n", " ")).strip()
        at = _diff_start(payload)
        message = payload[:at] if at >= 0 else payload
        body = re.split(r"^---\s*$", message, maxsplit=1, flags=re.MULTILINE)[0].strip("\n")
        diff = re.sub(r"^-- \n[^\n]*\n*\Z", "", payload[at:], flags=re.MULTILINE) if at >= 0 else ""
        sha = MBOX_FROM_RE.match(first)
        commit = sha.group(1) if sha else ""
        pr = pr_from_subject(subject)
        bug = f"https://github.com/{github}/pull/{pr}" if pr is not None else None
        origin = f"https://github.com/{github}/commit/{commit}" if commit else where
        out.append(Change(subject, body, _decoded(headers.get("From")), origin, bug, diff))
    return out


def split_plain(text: str) -> tuple[str, str]:
    """(what comes before the diff, the diff) of a plain .patch/.diff file."""
    at = _diff_start(text)
    return (text, "") if at < 0 else (text[:at], text[at:])


def rebase_path(path: str, package_root: str) -> str | None:
    """`path` as the pin spells it: from its first `package_root` component on (`a/vllm/x.py`, `vllm-0.34.0/vllm/x.py`
    and `vllm/x.py` are all `vllm/x.py`); None when it names no file under the package root."""
    parts = PurePosixPath(path.split("\t", 1)[0].strip()).parts
    if ".." in parts or not parts or parts[0] == "/":
        return None
    return "/".join(parts[parts.index(package_root) :]) if package_root in parts[:-1] else None


@dataclass(frozen=True)
class GitDiff:
    text: str  # `diff --git` sections, paths under the package root, full index lines (ZERO where unknown)
    paths: tuple[str, ...]
    left_out: tuple[str, ...]  # files the source changes outside the package root (not in the image)


def as_git_diff(diff: str, package_root: str) -> GitDiff:
    """A unified diff of any maker (git, `diff -ruN` of two trees, GitHub) as the git diff a patch file holds,
    each path rewritten to the package root; files outside it are left out (and named)."""
    try:
        patchset = PatchSet(diff)
    except UnidiffParseError as exc:
        raise PatchError(f"malformed diff: {exc}", hint="give a unified diff (`git diff`, `diff -u`)") from exc
    out: list[str] = []
    paths: list[str] = []
    left: list[str] = []
    for pf in patchset:
        if pf.is_binary_file:
            raise PatchError(f"{pf.path}: binary diff is refused", hint="patches may only change text files")
        old = None if pf.is_added_file else rebase_path(pf.source_file.removeprefix("a/"), package_root)
        new = None if pf.is_removed_file else rebase_path(pf.target_file.removeprefix("b/"), package_root)
        path = new or old
        if path is None or (old is None and not pf.is_added_file) or (new is None and not pf.is_removed_file):
            left.append(pf.path)
            continue
        blob = next((m.group(1) for ln in pf.patch_info or () if (m := FULL_INDEX_RE.match(ln))), ZERO)
        head = [f"diff --git a/{old or path} b/{new or path}"]
        head += (
            ["new file mode 100644"] if pf.is_added_file else ["deleted file mode 100644"] if pf.is_removed_file else []
        )
        head += [
            f"index {ZERO if pf.is_added_file else blob}..{ZERO}",
            f"--- {'/dev/null' if old is None else 'a/' + old}",
            f"+++ {'/dev/null' if new is None else 'b/' + new}",
        ]
        out.append("\n".join(head) + "\n" + "".join(str(h) for h in pf))
        paths.append(path)
    return GitDiff("".join(out), tuple(paths), tuple(left))


def render_header(change: Change, *, group: str, date: str, applied: str = "", forwarded: str = "not-needed") -> str:
    """The DEP-3 header of a backport: Description (subject, then the body), Author, Origin, Bug (the PR),
    Forwarded (upstream's own change: not-needed), Upstream-Status: Backport, Applied-Upstream (the release
    that has it, when known; rebase fills it otherwise), Last-Update, Group."""
    body = "".join(f" {ln}\n" if ln.strip() else " .\n" for ln in change.body.strip("\n").splitlines())
    lines = [
        f"Description: {change.subject}\n",
        body,
        f"Author: {change.author}\n",
        f"Origin: upstream, {change.origin}\n",
    ]
    lines += [f"Bug: {change.bug}\n"] if change.bug else []
    lines += [
        f"Forwarded: {forwarded}\n",
        "Upstream-Status: Backport\n",
        f"Applied-Upstream:{' ' + applied if applied else ''}\n",
        f"Last-Update: {date}\n",
        f"Group: {group}\n",
        "---\n",
    ]
    return "".join(lines)


def next_filename(existing: list[str], subject: str) -> str:
    """`NNNN-slug.patch`, numbered after the highest number in the series."""
    numbers = [int(m.group(1)) for name in existing if (m := re.match(r"^(\d{4})-", name))]
    words = re.sub(r"[^a-z0-9]+", "-", PR_IN_SUBJECT_RE.sub("", subject).lower()).strip("-")
    return f"{max(numbers, default=0) + 1:04d}-{words[:52].rstrip('-') or 'backport'}.patch"
