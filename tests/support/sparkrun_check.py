"""Run under sparkrun's interpreter: load a recipe with sparkrun's own loader, print what it makes of it.

Usage: PYTHON tests/support/sparkrun_check.py RECIPE.yaml  ->  JSON on stdout.
"""

from __future__ import annotations

import json
import sys

from sparkrun.core.recipe import Recipe
from sparkrun.orchestration.executors._base import ExecutorConfig
from sparkrun.runtimes.vllm_distributed import VllmDistributedRuntime

recipe = Recipe.load(sys.argv[1])
runtime = VllmDistributedRuntime()
executor = ExecutorConfig.from_chain(recipe.executor_config)
print(
    json.dumps(
        {
            "runtime": recipe.runtime,
            "container": recipe.container,
            "env": recipe.env,
            "min_nodes": recipe.min_nodes,
            "max_nodes": recipe.max_nodes,
            "issues": recipe.validate(),
            "command": runtime.generate_command(recipe, {}, is_cluster=False),
            "executor": {"ulimit": executor.ulimit, "cap_add": executor.cap_add, "memory_limit": executor.memory_limit},
        }
    )
)
