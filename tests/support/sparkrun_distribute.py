"""Run under sparkrun's interpreter: sparkrun's launch path up to, not including, starting the runtime.

Usage: PYTHON tests/support/sparkrun_distribute.py RECIPE.yaml HOST [HOST...]  ->  JSON on stdout.

These are the calls `sparkrun build` (sparkrun/api/_build.py) and `sparkrun run` make before
they start vLLM, with sparkrun's own config (HOME's `~/.config/sparkrun`, whose `ssh.options`
reach the test's sshd) and its own plugin discovery:
- `prepare_images` runs the recipe's builder (`builder: imgbuild`, found through the
  `sparkrun.plugins` entry point) and re-plans the images around the reference it returns;
- `stage_prepared_images` distributes the container (no models): the identity check, then the
  builtin `docker save | ssh HOST docker load` (no distribution provider is enabled), then the
  resident image id of every host, resolved over ssh (`require_content_ids`).
"""

from __future__ import annotations

import json
import logging
import sys

from sparkrun.core.bootstrap import get_runtime, init_sparkrun
from sparkrun.core.config import SparkrunConfig
from sparkrun.core.image_distribution import _PROVIDERS
from sparkrun.core.image_preparation import prepare_images, stage_prepared_images
from sparkrun.core.recipe import Recipe
from sparkrun.orchestration.primitives import build_ssh_kwargs

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
v = init_sparkrun(log_level="INFO")
config = SparkrunConfig()
recipe = Recipe.load(sys.argv[1])
hosts = sys.argv[2:]
runtime = get_runtime(recipe.runtime, v)
ssh_kwargs = build_ssh_kwargs(config)
prepared = prepare_images(recipe, runtime, hosts, config=config, v=v, ssh_kwargs=ssh_kwargs)
staged = stage_prepared_images(
    prepared,
    recipe,
    hosts,
    str(config.hf_cache_dir),
    config,
    recipe_name=recipe.name,
    require_content_ids=True,
    stage_models=False,
    ssh_kwargs=ssh_kwargs,
)
print(
    json.dumps(
        {
            "builder": type(prepared.builder).__qualname__ if prepared.builder else None,
            "source_image": prepared.source_image,
            "head_image": prepared.head_image,
            "images_by_node": list(prepared.images_by_node),
            "content_images_by_node": list(staged.content_images_by_node),
            "providers": sorted(_PROVIDERS),
            "ssh_options": config.ssh_options,
        }
    )
)
