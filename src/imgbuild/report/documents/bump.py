"""The document of `imgbuild patches bump`, apart from the other patches documents: its type (workflows/bump.py's
`Bumped`, what `Bump.shown()` makes) holds the rebase's domain types, which import the carry machinery (and
gitpython), loaded only when a bump prints."""

from __future__ import annotations

from imgbuild.report.documents import Contract

PATCHES_BUMP = Contract(
    "patches-bump",
    "imgbuild.workflows.bump:Bumped",
    "`imgbuild patches bump --json`: the bump's outcome; on a conflict or a failed build `ok` is false and `error` "
    "is the error document's body",
)
