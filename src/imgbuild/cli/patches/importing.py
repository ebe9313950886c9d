"""`imgbuild patches import SOURCE`: an upstream fix as a new patch of the series."""

from __future__ import annotations

from typing import Annotated

import typer

from imgbuild.cli.options import JsonOpt


def import_cmd(
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE",
            help="A .patch/.diff file, a `git format-patch` mbox, a vLLM git clone (with --rev), or a GitHub pull "
            "request or commit URL.",
        ),
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="File name of the new patch (default: NNNN-<subject>.patch).")
    ] = None,
    after: Annotated[
        str | None,
        typer.Option("--after", metavar="PATCH", help="Put it after this patch of the series (default: at the end)."),
    ] = None,
    rev: Annotated[str | None, typer.Option("--rev", help="The commit, when SOURCE is a git clone.")] = None,
    group: Annotated[str, typer.Option("--group", help="The patch's Group: (variants select by group).")] = "backports",
    applied: Annotated[
        str,
        typer.Option(
            "--applied-upstream",
            metavar="RELEASE",
            help="The release that has the fix (Applied-Upstream:), when known; `patches rebase` fills it otherwise.",
        ),
    ] = "",
    description: Annotated[
        str | None,
        typer.Option("--description", "-m", help="Description (first line: the summary) instead of the source's."),
    ] = None,
    author: Annotated[str | None, typer.Option("--author", help="'Name <email>' instead of the source's.")] = None,
    origin: Annotated[
        str | None,
        typer.Option("--origin", help="Where the change is upstream (a commit or PR URL, or the release that has it)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check it and print the patch; write nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Import an upstream fix as a new DEP-3 patch of the series.

    Its paths are rewritten to the pin's package root (`a/vllm/x.py` and
    `vllm-0.34.0/vllm/x.py` are `vllm/x.py`; files outside vllm/, such as tests,
    are left out and named). It is applied where it goes (--after) on the pin and
    the patches before it, exact or at an offset (a 3-way merge when a git clone
    gives the original blobs; never fuzz), and its diff is made again against that
    tree. Its header says where it came from: Description and Author from the
    commit, `Origin: upstream, <commit or PR URL>`, `Bug:` (the PR), `Forwarded:
    not-needed`, `Upstream-Status: Backport`, Applied-Upstream, Last-Update, Group.
    The whole series is then checked with it, every variant too, and the patch and
    its series line are written only if that passes: all or nothing.

    A plain diff says nothing about the change: pass --description, --author and
    --origin. A change the pin already has is refused as upstreamed (exit 4); one that
    does not apply, or breaks a later patch, exit 5; a URL that cannot be fetched,
    exit 6, with the file to download by hand.

    Examples:

      imgbuild patches import https://github.com/vllm-project/vllm/pull/44237

      imgbuild patches import fix.diff -m "Fix X" --author "A <a@b>" --origin "vLLM 0.34.0" --after 0004

      imgbuild patches import ~/src/vllm --rev 1a2b3c4d --dry-run --json
    """
    from imgbuild.cli.options import find_root
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import console, print_json
    from imgbuild.workflows.importer import Said, import_patch

    said = Said(description, author, origin)
    result = import_patch(
        find_root(), source, rev=rev, name=name, after=after, group=group, applied=applied, said=said, dry_run=dry_run
    )
    if as_json:
        print_json(docs.PATCHES_IMPORT.of(result))
        return
    if dry_run:
        print(result.text, end="")
        return
    where = f"after {result.after}" if result.after else "first"
    line = f"imported {source} as patches/{result.filename} ({result.outcome} on the pin), {where} in the series"
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.left_out:
        console.print(f"left out (not under the package root): {', '.join(result.left_out)}", markup=False)
    console.print(f"series checked: {len(result.series)} patches apply; carried by {', '.join(result.variants)}",
                  markup=False, highlight=False)  # fmt: skip
