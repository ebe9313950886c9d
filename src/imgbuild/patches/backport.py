"""Backports of upstream fixes: what a source names, and the DEP-3 header (pure).

`patches import` (importer.py) reads a change from a git commit, a patch or
mbox file, or a GitHub PR/commit URL; this module turns those into plain data
(`Change`: message, author, origin, bug, diff) and renders the header. The
same module tells rebase and `check --onto` which patches are backports and
fills `Applied-Upstream:` once a release contains one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.header import decode_header, make_header
from email.parser import HeaderParser

from imgbuild.errors import UsageError

DEFAULT_GROUP = "backports"
DEFAULT_GITHUB = "vllm-project/vllm"  # the repository that `(#N)` in a subject refers to
GITHUB_HOSTS = ("github.com", "www.github.com")
MBOX_FROM_RE = re.compile(r"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$", re.MULTILINE)
SUBJECT_PREFIX_RE = re.compile(r"^\s*\[[^\]]*PATCH[^\]]*\]\s*", re.IGNORECASE)
PR_IN_SUBJECT_RE = re.compile(r"\(#(\d+)\)\s*$")
APPLIED_RE = re.compile(r"^(Applied-Upstream:)[ \t]*([^\r\n]*)(\r?\n)", re.MULTILINE)
ABBREV_INDEX_RE = re.compile(r"^index ([0-9a-f]{4,39})\.\.([0-9a-f]{4,39})((?: [0-7]{6})?)$", re.MULTILINE)


@dataclass(frozen=True)
class GithubRef:
    """A GitHub PR or commit URL, and where its `.patch` is."""

    owner: str
    repo: str
    pull: int | None
    commit: str | None

    @property
    def base(self) -> str:
        return f"https://github.com/{self.owner}/{self.repo}"

    @property
    def pull_url(self) -> str | None:
        return f"{self.base}/pull/{self.pull}" if self.pull is not None else None

    @property
    def commit_url(self) -> str | None:
        return f"{self.base}/commit/{self.commit}" if self.commit else None

    @property
    def patch_url(self) -> str:
        return f"{self.commit_url or self.pull_url}.patch"

    @property
    def origin(self) -> str:
        return self.commit_url or self.pull_url or self.base


@dataclass(frozen=True)
class Change:
    """One upstream change, whatever it came from."""

    subject: str
    body: str
    author: str  # "Name <email>"
    origin: str  # commit URL or id
    bug: str | None  # PR URL, when a PR number is known
    diff: str  # git diff text (index lines may be abbreviated)
    commit: str | None = None  # upstream commit id, when known


def parse_github_url(url: str) -> GithubRef | None:
    """The PR/commit a GitHub URL names, or None when `url` is not a GitHub URL.

    Accepts .../pull/N, .../pull/N/files, .../pull/N/commits/SHA,
    .../commit/SHA, with or without scheme and `.patch`/`.diff`.
    """
    rest = re.sub(r"^(https?://)?", "", url.strip())
    host, _, path = rest.partition("/")
    if host.lower() not in GITHUB_HOSTS:
        return None
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    path = re.sub(r"\.(patch|diff)$", "", path)
    parts = path.split("/")
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


def pr_from_subject(subject: str) -> int | None:
    """The PR number of a squash-merged subject like `Fix leak (#44237)`."""
    m = PR_IN_SUBJECT_RE.search(subject)
    return int(m.group(1)) if m else None


def _decoded(value: str | None) -> str:
    return str(make_header(decode_header(value))) if value else ""


@dataclass(frozen=True)
class MailPatch:
    commit: str | None
    author: str
    subject: str
    body: str
    diff: str


def parse_mbox(text: str) -> list[MailPatch]:
    """The messages of a `git format-patch` mbox, or [] when `text` is not one."""
    starts = [m.start() for m in MBOX_FROM_RE.finditer(text)]
    if not starts:
        return []
    out = []
    for i, start in enumerate(starts):
        chunk = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)]
        first, _, rest = chunk.partition("\n")
        head, _, payload = rest.partition("\n\n")
        headers = HeaderParser().parsestr(head + "\n")
        subject = SUBJECT_PREFIX_RE.sub("", _decoded(headers.get("Subject")).replace("\n", " ")).strip()
        diff_at = _diff_start(payload)
        message = payload[:diff_at] if diff_at >= 0 else payload
        # format-patch puts `---` and a diffstat between the message and the diff
        body = re.split(r"^---\s*$", message, maxsplit=1, flags=re.MULTILINE)[0].strip("\n")
        diff = _strip_signature(payload[diff_at:]) if diff_at >= 0 else ""
        sha = MBOX_FROM_RE.match(first)
        out.append(MailPatch(sha.group(1) if sha else None, _decoded(headers.get("From")), subject, body, diff))
    return out


def _diff_start(text: str) -> int:
    if text.startswith("diff --git "):
        return 0
    at = text.find("\ndiff --git ")
    return at + 1 if at >= 0 else -1


def _strip_signature(diff: str) -> str:
    """A format-patch diff without its trailing `-- \\n<git version>` signature."""
    m = re.search(r"^-- \n[^\n]*\n*\Z", diff, flags=re.MULTILINE)
    return diff[: m.start()] if m else diff


def split_plain(text: str) -> tuple[str, str]:
    """(text before the first `diff --git`, the diff) of a plain .patch/.diff file."""
    at = _diff_start(text)
    if at < 0:
        return text, ""
    return text[:at], text[at:]


def diff_paths(diff: str) -> list[str]:
    """Every path a git diff names (both sides), in order."""
    paths: list[str] = []
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            rest = line[len("diff --git ") :]
            cut = rest.find(" b/")
            named = [rest[2:cut], rest[cut + 3 :]] if rest.startswith("a/") and cut > 0 else [rest]
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            named = [line.split(" ", 2)[2]]
        else:
            continue
        paths += [p for p in named if p not in paths]
    return paths


def outside(paths: list[str], package_root: str) -> list[str]:
    return [p for p in paths if p.split("/", 1)[0] != package_root or ".." in p.split("/") or p.startswith("/")]


def abbreviated_blobs(diff: str) -> set[str]:
    """Abbreviated blob ids on `index` lines (git format-patch and GitHub write those)."""
    return {sha for m in ABBREV_INDEX_RE.finditer(diff) for sha in m.group(1, 2) if set(sha) != {"0"}}


def expand_index_lines(diff: str, full: dict[str, str]) -> str:
    """`diff` with abbreviated `index` ids replaced by `full[abbrev]`.

    All-zero ids become the 40-zero id. An id nobody can resolve is padded
    with zeros to 40 digits: the diff parses, and a 3-way merge then says
    plainly that the original blob is not available.
    """

    def one(sha: str) -> str:
        if set(sha) == {"0"}:
            return "0" * 40
        return full.get(sha) or sha.ljust(40, "0")

    return ABBREV_INDEX_RE.sub(lambda m: f"index {one(m.group(1))}..{one(m.group(2))}{m.group(3)}", diff)


# -- the DEP-3 header ---------------------------------------------------------------
def _continuation(text: str) -> str:
    lines = [ln.rstrip() for ln in text.strip("\n").splitlines()]
    return "".join(f" {ln}\n" if ln.strip() else " .\n" for ln in lines)


def render_header(change: Change, *, group: str, date: str) -> str:
    """The DEP-3 header of a backport (Applied-Upstream stays empty until a release has it)."""
    lines = [f"Description: {change.subject}\n"]
    if change.body.strip():
        lines.append(_continuation(change.body))
    lines.append(f"Author: {change.author}\n")
    lines.append(f"Origin: upstream, {change.origin}\n")
    if change.bug:
        lines.append(f"Bug: {change.bug}\n")
    lines += [
        "Upstream-Status: Backport\n",
        "Applied-Upstream:\n",
        f"Last-Update: {date}\n",
        f"Group: {group}\n",
        "---\n",
    ]
    return "".join(lines)


def is_backport(fields: dict[str, str]) -> bool:
    return fields.get("Upstream-Status", "").strip().lower().startswith("backport")


def set_applied_upstream(text: str, release: str) -> str:
    """`text` (a patch file) with `Applied-Upstream: <release>` in its header ('' empties it)."""
    head_end = _diff_start(text)
    head, rest = (text[:head_end], text[head_end:]) if head_end >= 0 else (text, "")
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
    text = data.decode("utf-8", errors="surrogateescape")
    return set_applied_upstream(text, release).encode("utf-8", errors="surrogateescape")


def slug(subject: str, limit: int = 52) -> str:
    text = PR_IN_SUBJECT_RE.sub("", subject).lower()
    words = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    return words[:limit].rstrip("-") or "backport"


def next_filename(existing: list[str], subject: str) -> str:
    """`NNNN-slug.patch`, numbered after the highest number in the series."""
    numbers = [int(m.group(1)) for name in existing if (m := re.match(r"^(\d{4})-", name))]
    return f"{max(numbers, default=0) + 1:04d}-{slug(subject)}.patch"
