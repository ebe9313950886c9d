"""Has a release taken a backport? (`patches rebase` and `check --onto`.) A fix changed again upstream
no longer matches hunk by hunk; it is found by patch-id among the commits between the two releases,
limited to the backport's files."""

from __future__ import annotations

import dataclasses
import re

from imgbuild.patches.backport import is_backport
from imgbuild.patches.carry import Carry
from imgbuild.patches.hunks import encode
from imgbuild.upstream.git import LITERAL, GitError, GitRepo, patch_id


def diff_part(raw: str) -> str:
    at = re.search(r"^diff --git ", raw, flags=re.MULTILINE)
    return raw[at.start() :] if at else ""


def release_patch_ids(repo: GitRepo, old: str, new: str, paths: list[str]) -> dict[str, str]:
    """patch-id -> commit, for each commit in new but not in old, limited to `paths`."""
    try:
        log = repo.run(
            "log", "-p", "--no-merges", "--full-index", "--no-color", "--no-renames", "--format=commit %H",
            new, f"^{old}", "--", *paths, env=LITERAL,
        )  # fmt: skip
        out = repo.run("patch-id", "--stable", stdin=encode(log)) if log else ""
    except GitError:
        return {}
    ids: dict[str, str] = {}
    for line in out.splitlines():
        pid, _, sha = line.partition(" ")
        ids.setdefault(pid, sha)
    return ids


def recognise(carry: Carry, raw: str, repo: GitRepo, old: str, new: str, tag: str) -> Carry:
    """`carry`, or an `upstreamed` one when the backport's patch-id is among old..new's commits."""
    if not is_backport(carry.patch.fields) or carry.outcome != "conflict":
        return carry
    mine = patch_id(diff_part(raw))
    if mine is None:
        return carry
    found = release_patch_ids(repo, old, new, list(carry.patch.paths)).get(mine)
    if found is None:
        return carry
    return dataclasses.replace(
        carry,
        outcome="upstreamed",
        changes={},
        conflicts={},
        reason=f"backport applied upstream in {tag}: commit {found[:12]} has the same patch-id",
    )
