"""The documents of deploying and of failing: recipe, history, rollback, error."""

from __future__ import annotations

from imgbuild.report.documents import Contract, Document
from imgbuild.report.documents.parts import ErrorBody

RECIPE = Contract("recipe", "imgbuild.deploy.recipes:RecipeWritten", "`imgbuild recipe VARIANT --profile P --json`")


HISTORY = Contract(
    "history",
    "imgbuild.deploy.history:History",
    "`imgbuild history VARIANT --json`: the variant's builds in the local store, newest first",
)
ROLLBACK = Contract(
    "rollback", "imgbuild.deploy.history:Rollback", "`imgbuild rollback VARIANT --to TAG|DIGEST --json`"
)


class Error(Document):
    """The failure document of any command under --json (printed by cli/main.py)."""

    name = "error"
    error: ErrorBody
