"""`imgbuild patches import SOURCE`: forwards to importer.py."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild.cli.options import JsonOpt
from imgbuild.patches import backport


def register(app: typer.Typer) -> None:
    app.command("import")(import_cmd)


def import_cmd(
    source: Annotated[
        str,
        typer.Argument(metavar="SOURCE", help="Git repository (path or URL), .patch/.diff/mbox file, or GitHub URL."),
    ],
    rev: Annotated[
        str | None, typer.Option("--rev", metavar="REV", help="The commit to import, when SOURCE is a git repository.")
    ] = None,
    group: Annotated[str, typer.Option("--group", help="Group of the new patch.")] = backport.DEFAULT_GROUP,
    name: Annotated[
        str | None, typer.Option("--name", help="File name of the new patch (default: NNNN-<subject>.patch).")
    ] = None,
    description: Annotated[
        str | None,
        typer.Option("--description", "-m", help="Description (first line: summary) instead of the message."),
    ] = None,
    author: Annotated[str | None, typer.Option("--author", help="'Name <email>' instead of the commit's.")] = None,
    origin: Annotated[
        str | None, typer.Option("--origin", help="Commit URL or id for `Origin: upstream, ...`.")
    ] = None,
    bug: Annotated[str | None, typer.Option("--bug", help="URL for `Bug:` (default: the PR, when known).")] = None,
    github: Annotated[
        str, typer.Option("--github", metavar="OWNER/REPO", help="Repository that `(#N)` in a subject refers to.")
    ] = backport.DEFAULT_GITHUB,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the patch; write nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Import an upstream fix as a backport: a new patch at the end of the series.

    The change is carried onto the pinned release with the rebase rules (exact,
    offset, then a 3-way merge from its original blobs; never fuzz), its diff is
    regenerated against the pin, and it gets a DEP-3 header: Description and
    Author from the commit, `Origin: upstream, <commit>`, `Bug:` (the PR, when
    known), `Upstream-Status: Backport`, an empty `Applied-Upstream:` (rebase
    fills it once a release has the change), Last-Update and `Group: backports`.

    Refused (exit 4) when it touches files outside vllm/, or when the pin already
    has it (reported as upstreamed); exit 5 when it does not apply to the pin;
    exit 6 when a URL cannot be reached.

    Examples:

      imgbuild patches import ~/src/vllm --rev 1a2b3c4d

      imgbuild patches import fix-prefix-cache-leak.patch

      imgbuild patches import https://github.com/vllm-project/vllm/pull/44237 --dry-run
    """
    from imgbuild.project import find_root
    from imgbuild.report.tables import console, print_json
    from imgbuild.workflows import importer

    overrides = importer.Overrides(description, author, origin, bug, github)
    result = importer.import_patch(
        find_root(), source, rev=rev, group=group, name=name, overrides=overrides, dry_run=dry_run
    )
    if as_json:
        print_json("patches-import", result.to_json())
        return
    if dry_run:
        print(result.text, end="")
        return
    console.print(f"imported {source} as patches/{result.filename} ({result.outcome} on the pin)")
    console.print(f"series: {result.filename} added at the end, group {group}")
