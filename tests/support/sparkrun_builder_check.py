"""Run under sparkrun's interpreter: load `builder: imgbuild` through sparkrun's own plugin discovery and call it.

Usage: PYTHON tests/support/sparkrun_builder_check.py RECIPE.yaml OK_COMMAND FAIL_COMMAND [OTHER_COMMAND...]
->  JSON on stdout ("failed": what FAIL_COMMAND raised, "others": what each OTHER_COMMAND did).
The installed-plugin loader (`sparkrun.plugins` entry points, enabled in the config) finds the builder; each
command stands in for `imgbuild` (IMGBUILD_COMMAND), so the test sees what prepare() runs and returns.
"""

from __future__ import annotations

import json
import os
import sys

from sparkrun.core.bootstrap import get_builder, init_sparkrun
from sparkrun.core.installed_plugins import installed_plugin_inventory
from sparkrun.core.recipe import Recipe
from sparkrun.orchestration.infiniband import MANAGED_COMM_ENV_KEYS

v = init_sparkrun()
builder = get_builder("imgbuild", v)
recipe = Recipe.load(sys.argv[1])
out: dict[str, object] = {
    "class": f"{type(builder).__module__}.{type(builder).__qualname__}",
    "inventory": [
        {"name": r.name, "module": r.module, "package": r.package, "loaded": r.loaded, "failure": r.failure}
        for r in installed_plugin_inventory()
    ],
    "managed_env": sorted(MANAGED_COMM_ENV_KEYS),
    "validate": [str(i) for i in builder.validate_recipe(recipe)],
    "pull_ref": builder.pull_ref(recipe.container, recipe),
}
os.environ["IMGBUILD_COMMAND"] = sys.argv[2]
out["built"] = builder.prepare(recipe.container, recipe, ["node1", "node2"])


def failure(command: str) -> dict[str, object] | None:
    os.environ["IMGBUILD_COMMAND"] = command
    try:
        builder.prepare(recipe.container, recipe, ["node1"])
    except RuntimeError as exc:
        return {"type": type(exc).__name__, "message": str(exc), "exit_code": getattr(exc, "exit_code", None)}
    return None


out["failed"] = failure(sys.argv[3])
out["others"] = [failure(command) for command in sys.argv[4:]]
print(json.dumps(out))
