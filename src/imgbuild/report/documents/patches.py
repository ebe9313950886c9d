"""The documents of `imgbuild patches ...`: list, status, check, apply, rebase, edit, refresh, bump, import."""

from __future__ import annotations

from imgbuild.report.documents import Contract

# -- list, status ---------------------------------------------------------------------------------------------------
PATCHES_LIST = Contract(
    "patches-list", "imgbuild.project:SeriesListing", "`imgbuild patches list --json`: the series in order"
)


PATCHES_STATUS = Contract("patches-status", "imgbuild.workflows.status:StatusShown", "`imgbuild patches status --json`")


# -- check, check --onto, apply --------------------------------------------------------------------------------------
PATCHES_CHECK = Contract(
    "patches-check",
    "imgbuild.workflows.checkstack:SeriesChecked",
    "`imgbuild patches check --json` (also what a failed check prints: exit 1, no error document). v2: `ok` is "
    "false too when a pin does not have what another pin's release requires and no override in "
    "patches/upstream.yaml says why, or an override replaces nothing (`pin_problems`); `requirements`: each pinned "
    "release's requirements on the other pins.",
)


PATCHES_CHECK_ONTO = Contract(
    "patches-check-onto",
    "imgbuild.workflows.matrix:MatrixChecked",
    "`imgbuild patches check --onto REF... --json`: variant x ref x patch",
)


PATCHES_APPLY = Contract(
    "patches-apply", "imgbuild.workflows.checkstack:Applied", "`imgbuild patches apply --into DIR --json`"
)


# -- rebase ---------------------------------------------------------------------------------------------------------
PATCHES_REBASE = Contract(
    "patches-rebase",
    "imgbuild.workflows.rebase.state:Rebased",
    "`imgbuild patches rebase --onto REF | --continue | --skip --json`: a rebase that finished (one that stops at a "
    "conflict prints the error document, `stopped` under `error`)",
)


PATCHES_REBASE_STATUS = Contract(
    "patches-rebase-status",
    "imgbuild.workflows.rebase.state:RebaseStatus",
    "`imgbuild patches rebase --json` with no option: the rebase in progress, if any",
)


PATCHES_REBASE_ABORT = Contract(
    "patches-rebase-abort", "imgbuild.workflows.rebase.state:Aborted", "`imgbuild patches rebase --abort --json`"
)


# -- edit, refresh --------------------------------------------------------------------------------------------------
PATCHES_EDIT = Contract("patches-edit", "imgbuild.workflows.queue:Opened", "`imgbuild patches edit --json`")


PATCHES_EDIT_DISCARD = Contract(
    "patches-edit-discard", "imgbuild.workflows.queue:Discarded", "`imgbuild patches edit --discard --json`"
)


PATCHES_REFRESH = Contract("patches-refresh", "imgbuild.workflows.queue:Refreshed", "`imgbuild patches refresh --json`")


# -- import ---------------------------------------------------------------------------------------------------------
PATCHES_IMPORT = Contract(
    "patches-import",
    "imgbuild.workflows.importer:Imported",
    "`imgbuild patches import SOURCE --json`: the patch written (or, with --dry-run, that would be) and the series "
    "checked with it",
)
