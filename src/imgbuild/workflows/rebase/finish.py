"""The end of `patches rebase`: the new series checked (and each variant), patches/, the series and the
pin written through one journal, and the review report with range-diffs. Upstreamed patches move to
patches/upstreamed/ behind a `# upstreamed in TAG: FILE` line, so a release that reverts them brings them back."""

from __future__ import annotations

import shutil
from pathlib import Path

from imgbuild.atomic import write_json
from imgbuild.config.models import UpstreamPin, load_pins, load_variant
from imgbuild.errors import ImgbuildError, StateError
from imgbuild.patches import backport
from imgbuild.patches.apply import apply_stack
from imgbuild.patches.patchfile import Patch, parse_bytes, parse_patch
from imgbuild.patches.series import parse_series
from imgbuild.patches.variants import resolve_variants
from imgbuild.progress import Say
from imgbuild.upstream.git import CommitTree, GitError, GitRepo
from imgbuild.upstream.refs import wheel_pin_fields
from imgbuild.workflows.rebase.review import render_report, report_paths
from imgbuild.workflows.rebase.state import (
    Final,
    Item,
    PatchResult,
    RebaseDone,
    RebaseState,
    Row,
    moving_pin,
    save,
    session,
)
from imgbuild.workflows.writeback import (
    Journal,
    check_unchanged,
    dormant_line,
    export_patch,
    rewrite_pin_named,
    rewrite_series_lines,
)

SKIPPED = "skipped"  # patches/skipped/: patches dropped with --skip, kept for later


def finish(root: Path, state: RebaseState, say: Say) -> RebaseDone:
    work = session(root)
    check_unchanged(root, state.inputs, "the rebase")
    scratch = work.scratch()
    pin_path = root / "patches" / "upstream.yaml"
    pin = moving_pin(root, state)
    onto, date = state.onto, state.today
    journal = Journal(root, work.txn)
    series_text = (root / "patches" / "series").read_text(encoding="utf-8")
    line_ops: dict[int, str | None] = {}
    new_stack: list[Patch] = []
    rows = []
    for item, res in zip(state.items, state.results, strict=True):
        filename, dormant = item.filename, item.dormant
        orig_bytes = (root / item.path).read_bytes()
        orig = parse_bytes(filename, orig_bytes, pin.package_root)
        final: Final = res.outcome
        file, range_text = "unchanged", ""
        if res.commit and res.parent:
            data = export_patch(
                scratch,
                res.parent,
                res.commit,
                orig_bytes,
                orig,
                res.header or orig.header,  # a header the author rewrote at the stop replaces the old one
                package_root=pin.package_root,
                date=date,
                header_changed=res.header is not None,
            )
            if dormant:
                data = backport.applied_upstream_bytes(data or orig_bytes, orig.fields, "")
                journal.delete(item.path)
                line_ops[item.line] = filename
                final = "reinstated"
            if data is not None:
                journal.write(f"patches/{filename}", data)
                file = "reinstated" if dormant else "re-exported"
            new_stack.append(parse_bytes(filename, data or orig_bytes, pin.package_root))
            if item.old_commit and data is not None:
                range_text = _range_diff(scratch, item, res)
        elif res.outcome == "upstreamed" and not dormant:
            journal.write(
                f"patches/upstreamed/{filename}", backport.applied_upstream_bytes(orig_bytes, orig.fields, onto.tag)
            )
            journal.delete(item.path)
            line_ops[item.line] = dormant_line(onto.tag, filename)
            file = f"moved to patches/upstreamed/{filename}"
        elif res.outcome == "skipped":
            journal.write(f"patches/{SKIPPED}/{filename}", orig_bytes)  # skipped work is kept, not deleted
            journal.delete(item.path)
            line_ops[item.line] = f"# skipped in the rebase onto {onto.tag}: {SKIPPED}/{filename}"
            file = f"moved to patches/{SKIPPED}/{filename}"
        elif dormant:
            final = "still upstreamed" if res.outcome == "upstreamed" else "left in patches/upstreamed"
        rows.append(Row(res, final, file, range_text))
    new_series = rewrite_series_lines(series_text, line_ops)
    if new_series != series_text:
        journal.write("patches/series", new_series.encode("utf-8"))
    if onto.commit != state.old.commit:
        pin_text = pin_path.read_text(encoding="utf-8")
        fields = wheel_pin_fields(pin, onto.tag)
        journal.write(
            "patches/upstream.yaml",
            rewrite_pin_named(pin_text, pin, {"tag": onto.tag, "commit": onto.commit}, fields).encode(),
        )
    warnings = _verify(scratch, onto.commit, new_stack, root, _others(root, pin))
    md, js = render_report(state, rows, warnings)
    (work.directory / "report.md").write_text(md, encoding="utf-8")
    write_json(work.directory / "report.json", js)
    journal.prepare()
    state.status = "committing"
    state.written = journal.dests
    state.warnings = warnings
    state.rows = rows
    save(root, state)
    for line in warnings:
        say(f"warning: {line}")
    return commit(root, state)


def commit(root: Path, state: RebaseState) -> RebaseDone:
    work = session(root)
    journal = Journal.load(root, work.txn)
    if journal is None:
        raise StateError(
            f"{work.directory}: the rebase was writing patches/ but its journal is missing", hint="--abort"
        )
    journal.apply()
    report_md, report_json = report_paths(root, state)
    report_md.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(work.directory / "report.md", report_md)
    shutil.copyfile(work.directory / "report.json", report_json)
    work.remove()
    return RebaseDone(
        old=state.old,
        onto=state.onto,
        results=state.rows,
        written=state.written,
        report=report_md,
        warnings=state.warnings,
        upstream=state.upstream,
    )


def _range_diff(scratch: GitRepo, item: Item, res: PatchResult) -> str:
    try:
        old, new = f"{item.old_parent}..{item.old_commit}", f"{res.parent}..{res.commit}"
        return scratch.run("range-diff", "--no-color", "--creation-factor=999", old, new)
    except GitError as exc:
        return f"(range-diff failed: {exc})"


def _others(root: Path, pin: UpstreamPin) -> list[Patch]:
    """The series' patches of the pins that do not move (they stay as they are, on their pins)."""
    pins = load_pins(root / "patches" / "upstream.yaml")
    if len(pins) == 1:
        return []
    roots = {p.name: p.package_root for p in pins}
    out = []
    for entry in parse_series(root / "patches" / "series"):
        patch = parse_patch(root / "patches" / entry.filename, roots)
        if patch.upstream != pin.name:
            out.append(patch)
    return out


def _verify(scratch: GitRepo, commit: str, stack: list[Patch], root: Path, others: list[Patch]) -> list[str]:
    """The new series must apply exactly; variants that no longer apply are warned about."""
    tree = CommitTree(scratch, commit)
    result = apply_stack(stack, tree)
    bad = [o for o in result.outcomes if o.method != "exact"]
    if bad:
        raise StateError(
            f"internal check failed: the rewritten {bad[0].patch} does not apply exactly to {commit[:12]} "
            f"({bad[0].method})",
            hint="nothing was written; please report this, then `imgbuild patches rebase --abort`",
        )
    # Each variant's patches of the moving pin, applied without the ones it leaves out; the other pins'
    # patches (`others`) only name groups and patches for the selection.
    try:
        configs = {v.name: v for v in (load_variant(p) for p in sorted((root / "images").glob("*.yaml")))}
        return [
            f"variant {variant.name}: {o.patch} does not apply without the patches it leaves out ({o.method})"
            for variant in resolve_variants(configs, [*stack, *others]).values()
            for o in apply_stack([p for p in stack if p.name in variant.selected], tree).outcomes
            if o.method not in ("exact", "offset")
        ]
    except ImgbuildError as exc:  # a broken images/*.yaml or selection is reported; it does not stop the rebase
        return [f"variants were not checked: {exc.message}"]
