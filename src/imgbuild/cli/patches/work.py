"""`imgbuild patches rebase/edit/refresh/bump`: the commands that change patches/ (registered on the
`patches` app by cli/patches/app.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imgbuild.cli.build import BaseOpt
from imgbuild.cli.options import JsonOpt
from imgbuild.errors import UsageError
from imgbuild.progress import to_stderr


def rebase_cmd(
    onto: Annotated[
        list[str] | None,
        typer.Option(
            "--onto",
            metavar="REF",
            help="Tag, commit or release version to move the series to; NAME=REF moves the pin NAME "
            "(patches/upstream.yaml's `also:`) and only its patches; one --onto per upstream, rebased in turn.",
        ),
    ] = None,
    continue_: Annotated[bool, typer.Option("--continue", help="Take the resolved work tree and go on.")] = False,
    skip: Annotated[bool, typer.Option("--skip", help="Drop the patch the rebase stopped at, and go on.")] = False,
    abort: Annotated[
        bool, typer.Option("--abort", help="Stop and put patches/ and the pin back as they were.")
    ] = False,
    report: Annotated[
        Path | None, typer.Option("--report", help="Where to write the review report (markdown; JSON beside it).")
    ] = None,
    from_base: Annotated[
        str | None,
        typer.Option(
            "--from-base",
            metavar="IMAGE",
            help="With --onto NAME=VERSION: take that release of the wheel pin NAME from the base image IMAGE (its "
            "installed files, each checked against its RECORD), for a release the package index does not have.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Carry the patch series onto another upstream release, like `git rebase`.

    Each patch gets one outcome: exact or offset (carried, context refreshed),
    upstreamed (already in the release: dropped, kept in patches/upstreamed/),
    partly-upstreamed (shrunk to the hunks still needed), or conflict (a 3-way
    merge from the patch's original blobs leaves markers in a work tree and the
    rebase stops; then --continue, --skip or --abort). Files that moved upstream
    are followed. At the end only changed patches are re-exported (headers kept
    byte for byte, Last-Update bumped), the pin is updated in the same step, and a
    review report with range-diffs is written.

    With several upstreams pinned, --onto NAME=REF moves the pin NAME and carries
    only its patches (a plain REF is the first pin's); --onto A=x --onto B=y
    rebases A, then B, each with its own report.

    --from-base IMAGE takes the release from a base image instead of the
    package index: the stock vLLM 0.34.0 image carries FlashInfer 0.7.3, which
    the index never had, so `--onto flashinfer=0.7.3 --from-base
    vllm/vllm-openai:v0.34.0` carries the stack onto what that image holds.
    """
    from rich.table import Table

    from imgbuild.cli.options import find_root
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import console, print_json
    from imgbuild.workflows.rebase import control as rebase

    root = find_root()
    chosen = [
        name
        for name, on in (("--onto", onto is not None), ("--continue", continue_), ("--skip", skip), ("--abort", abort))
        if on
    ]
    if len(chosen) > 1:
        raise UsageError(f"{' and '.join(chosen)} cannot be used together")
    if abort:
        aborted = rebase.abort(root)
        print_json(docs.PATCHES_REBASE_ABORT.of(aborted)) if as_json else console.print(aborted.message)
        return
    if from_base is not None and (onto is None or len(onto) != 1 or "=" not in onto[0]):
        raise UsageError("--from-base goes with one --onto NAME=VERSION", hint="e.g. --onto flashinfer=0.7.3")
    if onto is not None:
        if from_base is not None:
            from imgbuild.builder.base_wheel import from_base as wheel_from_base

            wheel_from_base(root, onto[0], from_base, to_stderr)
        done = rebase.start(root, onto[0], more=onto[1:], report=report.resolve() if report else None, say=to_stderr)
    elif continue_ or skip:
        done = rebase.resume(root, "skip" if skip else "continue", say=to_stderr)
    else:
        info = rebase.status(root)
        if as_json:
            print_json(docs.PATCHES_REBASE_STATUS.of(rebase.RebaseStatus(info is not None, info)))
        elif info is None:
            console.print("no rebase in progress; start one with `imgbuild patches rebase --onto REF`")
        else:
            console.print(rebase.in_progress_message(root) or "")
            console.print("run `imgbuild patches rebase --continue`, `--skip` or `--abort`")
        return
    if as_json:
        print_json(docs.PATCHES_REBASE.of(done.shown()))
        return
    for one in [*done.earlier, done]:
        what = f"{one.upstream} " if one.upstream else ""
        table = Table(title=f"rebase {what}{one.old.tag} -> {one.onto.tag}")
        for col in ("patch", "outcome", "file", "notes"):
            table.add_column(col)
        for row in one.results:
            table.add_row(row.filename, row.shown_outcome, row.file, row.reason)
        console.print(table)
        for w in one.warnings:
            console.print(f"[yellow]warning[/]: {w}")
        console.print(f"pin: {what}{one.onto.tag} @ {one.onto.commit}")
        console.print(f"review report: {one.report}")


def edit_cmd(
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            metavar="NAME",
            help="Edit the patches of this pin (patches/upstream.yaml's `also:`) on its release; default: the first.",
        ),
    ] = None,
    discard: Annotated[bool, typer.Option("--discard", help="Remove the work tree instead of opening it.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="With --discard: also throw away work not yet refreshed.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Open the series as a git branch: one commit per patch on the pinned release.

    With several pins, --upstream NAME opens the patches of the pin NAME on its release (a new commit
    there becomes a patch with `Upstream: NAME`); refresh writes back the pin that is open.

    Each commit message is the patch's DEP-3 header plus a `Patch-Name:` trailer.
    Edit, amend, reorder, drop or add commits with git in the work tree, then run
    `imgbuild patches refresh` to write them back to patches/. To backport an
    upstream fix, `git fetch` and `git cherry-pick` it (or `git am` a
    format-patch file) there: refresh makes it a new patch with a DEP-3 header.
    """
    from imgbuild.cli.options import find_root
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import console, print_json
    from imgbuild.workflows import queue as pq

    root = find_root()
    if discard:
        discarded = pq.discard(root, force=force)
        print_json(docs.PATCHES_EDIT_DISCARD.of(discarded)) if as_json else console.print(discarded.message)
        return
    if force:
        raise UsageError("--force only goes with --discard")
    opened = pq.open_queue(root, upstream)
    if as_json:
        print_json(docs.PATCHES_EDIT.of(opened))
        return
    verb = "opened" if opened.created else "already open"
    console.print(f"{verb}: {opened.work_tree}")
    console.print(f"branch `{pq.BRANCH}`: {opened.commits} commit(s) on {opened.tag} ({opened.base[:12]})")
    console.print("edit, `git commit --amend` or add commits there, then run `imgbuild patches refresh`")


def refresh_cmd(
    close: Annotated[bool, typer.Option("--close", help="Remove the work tree after a successful refresh.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write the `patches edit` branch back to patches/ and patches/series.

    Only patches whose diff or header changed are rewritten; headers are kept
    byte for byte (Last-Update bumped when the diff changed). New commits become
    new patches; dropped commits leave the series. Refused when the work tree
    has uncommitted changes.
    """
    from imgbuild.cli.options import find_root
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import console, print_json
    from imgbuild.workflows import queue as pq

    root = find_root()
    result = pq.refresh(root, close=close)
    if as_json:
        print_json(docs.PATCHES_REFRESH.of(result))
        return
    for label, names in (("rewritten", result.written), ("added", result.added), ("removed", result.removed)):
        for n in names:
            console.print(f"{label}: patches/{n}")
    console.print(f"unchanged: {len(result.unchanged)} patch(es)")
    if result.series_changed:
        console.print("patches/series updated")
    for w in result.warnings:
        console.print(f"[yellow]warning[/]: {w}")
    if result.closed:
        console.print("work tree removed")


def bump_cmd(
    onto: Annotated[
        str,
        typer.Option(
            "--onto",
            metavar="latest|REF",
            help="The release to move to: `latest` (default) or a tag, commit or release version.",
        ),
    ] = "latest",
    branch: Annotated[
        str | None,
        typer.Option("--branch", metavar="NAME", help="The branch to commit on (default: imgbuild/bump-TAG)."),
    ] = None,
    no_build: Annotated[
        bool, typer.Option("--no-build", help="Rebase and commit only; build and smoke-test nothing.")
    ] = False,
    base: BaseOpt = None,
    report_dir: Annotated[
        Path | None,
        typer.Option(
            "--report-dir",
            metavar="DIR",
            help="Where to write bump-TAG.md and .json (default: .imgbuild-work/reports/).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Carry the series onto the newest vLLM release as one change on a new branch, built and smoke-tested.

    Rebases the series (as `patches rebase --onto`) on a new git branch of the project, commits the
    rebased patches and pin there, builds every variant and smoke-tests it (as `imgbuild build`), and
    writes the review report: per patch carried, offset, 3-way, moved, upstreamed or conflicting, the
    range-diffs, the image ids. Nothing happens when the pin already is the newest release.

    A conflict stops it with the rebase's exit code (5), the rebase in progress and the per-hunk
    report written: resolve (docs/rebase-runbook.md), run `imgbuild patches rebase --continue`, then
    `imgbuild patches bump` again, which commits and builds the finished rebase.
    """
    from imgbuild.cli.build import options
    from imgbuild.cli.options import find_root
    from imgbuild.report.documents import bump as docs
    from imgbuild.report.tables import console, print_json
    from imgbuild.workflows import bump

    root = find_root()
    opts = None if no_build else options(base, None)
    done = bump.bump(root, onto, branch=branch, build=opts, report_dir=report_dir, say=to_stderr)
    if as_json:
        print_json(docs.PATCHES_BUMP.of(done.shown()))
    else:
        console.print(done.message, markup=False, highlight=False)
        if done.report is not None:
            console.print(f"review report: {done.report}", markup=False, highlight=False)
    if done.error is not None:
        done.error.reported = as_json  # under --json the report above is the one document
        raise done.error
