"""Run under sparkrun's interpreter: the runtime info a launch records, through sparkrun's own code on a
`builder: imgbuild` recipe, for a container the test started itself (a delegated build on the head; the published
variant's test gets the same from `sparkrun run` itself).

Usage: PYTHON tests/support/sparkrun_modes.py info RECIPE.yaml HOST CONTAINER  ->  JSON on stdout

What `core/launcher.py` does after a launch, for the head's CONTAINER: the runtime's `_collect_runtime_info` with the
recipe's builder (its `version_info_commands` run in the container), then the builder's `collect_container_labels`,
merged without overwriting, as the launcher merges them; `runtime_info` is what `sparkrun run` prints under "Runtime
versions:" and keeps in the job's metadata.
"""

from __future__ import annotations

import json
import sys

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

if mode != "info":
    sys.exit(f"unknown mode {mode!r}: info RECIPE.yaml HOST CONTAINER")
runtime = get_runtime(recipe.runtime, v)
container = sys.argv[4]
info = runtime._collect_runtime_info(host, container, ssh_kwargs, dry_run=False, builder=builder)
labels = builder.collect_container_labels(container, host, ssh_kwargs)
for key, value in labels.items():  # launcher.py: merged without overwriting existing keys
    info.setdefault(key, value)
print(json.dumps({"container": container, "runtime_info": info, "labels": labels}))
