"""`imgbuild patches ...`: inspect, check and apply the patch stack."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.options import FuzzOpt, JsonOpt
from imgbuild.cli.patches.importing import import_cmd
from imgbuild.cli.patches.work import bump_cmd, edit_cmd, rebase_cmd, refresh_cmd
from imgbuild.errors import CheckFailed, UsageError

if TYPE_CHECKING:
    from imgbuild.project import Project

app = typer.Typer(
    help=(
        "Work with the patch stack in patches/ (a quilt series of DEP-3 headed git diffs).\n\n"
        "Examples:\n\n"
        "  imgbuild patches list\n\n"
        "  imgbuild patches check --json\n\n"
        "  imgbuild patches apply --into /tmp/vllm-patched --variant engram-mem"
    ),
    no_args_is_help=True,
)


def _fuzz(allow_fuzz: int) -> int:
    if allow_fuzz and os.environ.get("CI"):
        raise UsageError("--allow-fuzz is refused in CI (CI is set)", hint="rebase the patch so it applies exactly")
    return allow_fuzz


@app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """List the series in order, with each patch's group and files."""
    from imgbuild.cli.options import load_project
    from imgbuild.report import tables
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import patches_table, print_json

    project = load_project()
    if as_json:
        print_json(docs.PATCHES_LIST.of(project.listing()))
        return
    tables.console.print(patches_table(project.patches))


@app.command()
def check(
    as_json: JsonOpt = False,
    allow_fuzz: FuzzOpt = 0,
    onto: Annotated[
        list[str] | None,
        typer.Option(
            "--onto", metavar="REF", help="Check against these refs instead (tag, commit, version, `pinned`, `latest`)."
        ),
    ] = None,
    more_refs: Annotated[list[str] | None, typer.Argument(metavar="REF", help="More refs, after --onto.")] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="With --onto: fail on anything but exact or offset.")
    ] = False,
) -> None:
    """Check that the whole series and every variant apply to the pinned release.

    Each patch is tried exact, then at an offset, then (only with --allow-fuzz)
    with fuzz, then by 3-way merge from its original blobs. A patch whose hunks
    are already in the release is reported `upstreamed`. Exit status 1 when any
    patch conflicts, needs fuzz, or needs a 3-way merge. Nothing is written.

    With --onto REF [REF...] (CI mode): carry the full series and each variant's
    selection onto each ref in memory, following moved files, never with fuzz,
    and print the variant x ref x patch matrix (or --json). Exit status 1 when a
    variant does not carry to a ref.
    """
    from rich.markup import escape

    from imgbuild.cli.options import load_project
    from imgbuild.report import tables
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import outcomes_table, print_json
    from imgbuild.workflows.checkstack import check_series

    across = bool(onto or more_refs or strict)
    project = load_project()
    project.refuse_bad_headers()
    if across:
        refs = split_refs(onto, more_refs)
        if not refs:
            raise UsageError("--strict goes with --onto REF")
        _check_onto(project, refs, as_json=as_json, strict=strict, allow_fuzz=allow_fuzz)
        return
    note_rebase(project.root)
    result = check_series(project, max_fuzz=_fuzz(allow_fuzz))
    if as_json:
        print_json(docs.PATCHES_CHECK.of(result.checked()))
    else:
        for name, outcomes in result.by_upstream():
            pin = project.pin_named(name)
            if outcomes or pin is project.pin:
                tables.console.print(outcomes_table(f"series on {pin.name} {pin.tag}", outcomes))
        for n, v in result.variants.items():
            tables.console.print(f"variant [bold]{n}[/]: ok ({len(v.selected)} patches)")
        for n, e in result.variant_errors.items():
            tables.console.print(f"variant [bold]{n}[/]: [bold red]FAILED[/] {e}")
        for problem in result.lint:
            tables.console.print(f"[yellow]lint[/]: {problem}")
        for need in result.needs:
            style = {"ok": "green", "overridden": "yellow"}.get(need.status, "bold red")
            tables.console.print(f"[{style}]pins[/]: {escape(need.message)}", highlight=False)
        for problem in result.pin_problems[sum(not n.ok for n in result.needs) :]:  # the stale overrides
            tables.console.print(f"[bold red]pins[/]: {escape(problem)}", highlight=False)
        tables.console.print(
            "[green]all patches apply[/]" if result.applies else "[bold red]the stack does not apply cleanly[/]"
        )
        if result.pin_problems:
            tables.console.print("[bold red]the pins disagree[/] (above)")
    if result.applies and result.pin_problems:
        raise CheckFailed(
            "the pins disagree: " + "; ".join(result.pin_problems),
            hint="bump the required pin (`imgbuild patches bump` moves it with the pin that requires it), or write "
            "an override with its reason under that pin in patches/upstream.yaml (docs/configuration.md)",
            reported=True,
        )
    if not result.ok:
        raise CheckFailed(
            "the stack does not apply cleanly to the pinned release",
            hint="`imgbuild patches check` shows each hunk; `imgbuild patches rebase` or `patches edit` fixes it",
            reported=True,
        )


@app.command()
def apply(
    into: Annotated[Path, typer.Option("--into", help="New (or empty) directory to write the patched tree to.")],
    variant: Annotated[
        str | None, typer.Option("--variant", "-v", help="Apply this variant's selection (default: the whole series).")
    ] = None,
    only_changed: Annotated[
        bool, typer.Option("--only-changed", help="Write only the files the patches change.")
    ] = False,
    as_json: JsonOpt = False,
    allow_fuzz: FuzzOpt = 0,
) -> None:
    """Write the pinned release with the stack applied into a new directory.

    All or nothing: the tree is staged beside DIR and renamed into place only
    when every patch applied. Neither the cache nor any existing file changes.
    """
    from imgbuild.cli.options import load_project
    from imgbuild.report import tables
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import outcomes_table, print_json
    from imgbuild.workflows.checkstack import SeriesRefused, apply_into

    project = load_project()
    try:
        done = apply_into(project, into, variant=variant, max_fuzz=_fuzz(allow_fuzz), only_changed=only_changed)
    except SeriesRefused as exc:
        if not as_json:  # under --json the report goes inside the one error document
            tables.console.print(outcomes_table("apply", exc.outcomes))
        raise
    if as_json:
        print_json(docs.PATCHES_APPLY.of(done))
    else:
        tables.console.print(outcomes_table(f"applied onto {project.pin.tag}", done.outcomes))
        tables.console.print(f"wrote {done.files} files to {done.into}")


@app.command()
def status(as_json: JsonOpt = False) -> None:
    """Show the pin, the cache state, and header problems in the series."""
    from imgbuild.cli.options import load_project
    from imgbuild.report import tables
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import print_json
    from imgbuild.workflows.status import status as status_of

    found = status_of(load_project())
    if as_json:
        print_json(docs.PATCHES_STATUS.of(found.shown()))
        return
    first = found.pins[0]
    for p in found.pins:
        tables.console.print(f"upstream: {p.name} {p.tag} @ {p.commit} ({p.kind}, {p.package_root}/)")
    state = "pinned commit cached" if first.pinned_commit_cached else "not cached yet: the next command fetches it"
    tables.console.print(f"cache:    {first.mirror} ({state})")
    tables.console.print(f"series:   {found.patches} patches, digest {found.digest[:16]}")
    tables.console.print(f"variants: {', '.join(found.variants)}")
    for problem in found.lint:
        tables.console.print(f"[yellow]lint[/]: {problem}")
    if found.rebase:
        tables.console.print(f"rebase:   {found.rebase.message}")
        tables.console.print("          run `imgbuild patches rebase --continue`, `--skip` or `--abort`")
    if found.edit:
        edit = found.edit
        if edit.problem:
            tables.console.print(f"edit:     {edit.problem}", markup=False, highlight=False)
        else:
            work = "work not in patches/ yet" if edit.unrefreshed else "nothing to refresh"
            line = f"edit:     {edit.upstream} {edit.tag} open at {edit.tree} ({work})"
            tables.console.print(line, markup=False, highlight=False)
            if edit.changed_since_opened:
                changed = ", ".join(edit.changed_since_opened)
                tables.console.print(f"          changed in patches/ since it was opened: {changed}", markup=False)
            tables.console.print(
                "          `imgbuild patches refresh` writes it back, `patches edit --discard` drops it"
            )
    if found.modified:
        tables.console.print(f"modified: {', '.join(found.modified)} (not committed)", markup=False, highlight=False)


def split_refs(onto: list[str] | None, extra: list[str] | None) -> list[str]:
    """--onto A --onto B,C D E -> [A, B, C, D, E] (duplicates removed)."""
    if extra and not onto:
        raise UsageError(
            f"unexpected argument(s) {' '.join(extra)}", hint="refs to check go after --onto: --onto REF [REF...]"
        )
    refs = [r.strip() for item in [*(onto or []), *(extra or [])] for r in item.split(",") if r.strip()]
    return list(dict.fromkeys(refs))


def note_rebase(root: Path) -> None:
    """Say so on stderr when a rebase is in progress or was interrupted."""
    from imgbuild.report import tables
    from imgbuild.workflows.workspace import state_dir

    if not state_dir(root, "rebase").exists():  # no rebase state: nothing to say, and no rebase module to load
        return
    from imgbuild.workflows.rebase.control import in_progress_message

    busy = in_progress_message(root)
    if busy:
        tables.err_console.print(f"[yellow]note[/]: {busy}; `imgbuild patches rebase --continue` or `--abort`")


def _check_onto(project: Project, refs: list[str], *, as_json: bool, strict: bool, allow_fuzz: int) -> None:
    from imgbuild.report import tables
    from imgbuild.report.documents import patches as docs
    from imgbuild.report.tables import print_json

    if allow_fuzz:
        raise UsageError("--allow-fuzz does not go with --onto: fuzz is never allowed there")
    from rich.markup import escape

    from imgbuild.report.matrix import matrix_table  # rich and the carry machinery: only with --onto
    from imgbuild.workflows.matrix import check_onto

    note_rebase(project.root)
    matrix = check_onto(project, refs, strict=strict)
    if as_json:
        print_json(docs.PATCHES_CHECK_ONTO.of(matrix.checked()))
    else:
        tables.console.print(matrix_table(matrix))
        for ref in matrix.refs:
            named = ref.tag if ref.ref == ref.tag else f"{ref.ref} is {ref.tag}"  # e.g. `latest is v0.34.0`
            tables.console.print(
                f"{named} ({ref.commit[:12]}): {matrix.seconds.get(ref.ref, 0.0):.3f} s", markup=False, highlight=False
            )
            for need in matrix.needs.get(ref.ref, ()):
                style = {"ok": "green", "overridden": "yellow"}.get(need.status, "bold red")
                tables.console.print(f"  [{style}]pins[/]: {escape(need.message)}", highlight=False)
        tables.console.print(f"[green]{matrix.summary}[/]" if matrix.ok else f"[bold red]{matrix.summary}[/]")
    if not matrix.ok:
        raise CheckFailed(matrix.summary, hint="`imgbuild patches rebase --onto REF` carries the stack", reported=True)


# After `status`, so that `imgbuild patches --help` lists them in this order.
app.command("rebase")(rebase_cmd)
app.command("edit")(edit_cmd)
app.command("refresh")(refresh_cmd)
app.command("bump")(bump_cmd)
app.command("import")(import_cmd)
