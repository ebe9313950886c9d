"""Run under sparkrun's interpreter: the pin step of `sparkrun export recipe --realize`, and the runtime info a
launch records, both through sparkrun's own code on a `builder: imgbuild` recipe.

Usage: PYTHON tests/support/sparkrun_modes.py pin RECIPE.yaml HOST      ->  JSON on stdout
       PYTHON tests/support/sparkrun_modes.py info RECIPE.yaml HOST CONTAINER  ->  JSON on stdout

- `pin`: `sparkrun.api._pin.pin_recipe_data`, what `export recipe --realize` runs once it has placed the workload
  (its placement needs a free accelerator slot, which the test's node, a second dockerd, has not): the recipe's
  builder is asked for `pull_ref` and the result pinned by digest (online: the registry's; a ref that is already
  `@sha256:` is kept as it is).
- `info`: what `core/launcher.py` does after a launch, for the head's CONTAINER (the test started it):
  the runtime's `_collect_runtime_info` with the recipe's builder (its `version_info_commands` run in the
  container), then the builder's `collect_container_labels`, merged without overwriting, as the launcher merges
  them; `runtime_info` is what `sparkrun run` prints under "Runtime versions:" and keeps in the job's metadata.
"""

from __future__ import annotations

import json
import sys

import yaml
from sparkrun.api._context import default_sctx
from sparkrun.api._pin import PinScope, pin_recipe_data
from sparkrun.core.bootstrap import get_builder, get_runtime, init_sparkrun
from sparkrun.core.config import SparkrunConfig
from sparkrun.core.recipe import Recipe
from sparkrun.orchestration.primitives import build_ssh_kwargs

v = init_sparkrun(log_level="INFO")
mode, path, host = sys.argv[1:4]
recipe = Recipe.load(path)
config = SparkrunConfig()
ssh_kwargs = build_ssh_kwargs(config)
builder = get_builder(recipe.builder, v)

if mode == "pin":
    with open(path) as f:
        data = yaml.safe_load(f)
    scope = PinScope(recipe=recipe, hosts=(host,), ssh_kwargs=ssh_kwargs)
    pins = pin_recipe_data(data, scope, offline=False, sctx=default_sctx())
    out: dict[str, object] = {
        "container": data["container"],
        "pins": [p.__dict__ for p in pins],
        "pull_ref": builder.pull_ref(recipe.container, recipe, config),
    }
else:
    runtime = get_runtime(recipe.runtime, v)
    container = sys.argv[4]
    info = runtime._collect_runtime_info(host, container, ssh_kwargs, dry_run=False, builder=builder)
    labels = builder.collect_container_labels(container, host, ssh_kwargs)
    for key, value in labels.items():  # launcher.py: merged without overwriting existing keys
        info.setdefault(key, value)
    out = {"container": container, "runtime_info": info, "labels": labels}
print(json.dumps(out))
