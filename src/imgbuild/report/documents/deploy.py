"""The documents of deploying and of failing: recipe, history, rollback, error."""

from __future__ import annotations

from imgbuild.report.documents import Contract

RECIPE = Contract("recipe", "imgbuild.deploy.recipes:RecipeWritten", "`imgbuild recipe VARIANT --profile P --json`")


HISTORY = Contract(
    "history",
    "imgbuild.deploy.history:History",
    "`imgbuild history VARIANT --json`: the variant's builds in the local store, newest first",
)
ROLLBACK = Contract(
    "rollback", "imgbuild.deploy.history:Rollback", "`imgbuild rollback VARIANT --to TAG|DIGEST --json`"
)

ERROR = Contract(
    "error", "imgbuild.shapes:ErrorReport", "The failure document of any command under --json (printed by cli/main.py)."
)
