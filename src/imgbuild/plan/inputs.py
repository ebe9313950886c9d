"""What the pinned release and the series contribute to every image's labels and digests (without docker)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from imgbuild.plan import labels
from imgbuild.plan.labels import ProjectInputs
from imgbuild.project import Project
from imgbuild.upstream.git import GitError, GitRepo


def project_inputs(project: Project) -> ProjectInputs:
    when = 0
    for pin in project.pins:  # the newest pinned commit (a wheel's commit is dated 0)
        up = project.resolved(pin.name)
        with contextlib.suppress(GitError, ValueError):  # a commit without a readable date counts as the epoch
            when = max(when, up.repo.commit_time(up.commit))
    return ProjectInputs(
        upstream=labels.Upstream.from_pin(project.pin),
        series_digest=project.series_digest,
        created=labels.source_date([p.fields.get("Last-Update", "") for p in project.patches], when),
        source=project_source(project.root),
        upstreams=tuple(labels.Upstream.from_pin(p) for p in project.pins) if project.multi else (),
        patch_upstreams=tuple((p.name, project.upstream_of(p).name) for p in project.patches) if project.multi else (),
        overrides=tuple(
            (p.name, p.override.requirement, p.override.version, p.override.reason) for p in project.pins if p.override
        ),
        patches=tuple((p.name, p.filename, p.sha256, p.fields.get("Last-Update", "")) for p in project.patches),
        commit_time=when,
    )


def project_source(root: Path) -> labels.Source:
    """This project's repository URL (its `origin`) and commit, as far as git knows them."""
    try:
        repo = GitRepo(root)
        revision = repo.verify("HEAD")
    except GitError:
        return labels.Source()
    try:
        remote = repo.run("remote", "get-url", "origin").strip()
    except GitError:
        remote = ""
    return labels.Source(labels.source_url(remote) if remote else None, revision or None)
