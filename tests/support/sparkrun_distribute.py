"""Run under sparkrun's interpreter: sparkrun's launch path up to, not including, starting the runtime.

Usage: PYTHON tests/support/sparkrun_distribute.py [--transfer-mode MODE] [--offline] [--prepare-only]
       RECIPE.yaml HOST [HOST...]  ->  JSON on stdout.

These are the calls `sparkrun build` (sparkrun/api/_build.py) and `sparkrun run` make before
they start vLLM, with sparkrun's own config (HOME's `~/.config/sparkrun`, whose `ssh.options`
reach the test's sshd) and its own plugin discovery:
- `prepare_images` runs the recipe's builder (`builder: imgbuild`, found through the
  `sparkrun.plugins` entry point) and re-plans the images around the reference it returns;
- `stage_prepared_images` distributes the container (no models): the identity check, then the
  builtin `docker save | ssh HOST docker load` (no distribution provider is enabled), then the
  resident image id of every host, resolved over ssh (`require_content_ids`).
`--transfer-mode` is sparkrun's (`local`, the default here, or `delegated`: the builder builds on the head and
distribution fans out from there). `--offline` is what `sparkrun build/run --offline` passes: `offline: True`
in the builder context ("Forced", `api/_build.py`) and `offline` to distribution. `--prepare-only` stops after
the builder.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from sparkrun.core.bootstrap import get_runtime, init_sparkrun
from sparkrun.core.config import SparkrunConfig
from sparkrun.core.image_distribution import _PROVIDERS
from sparkrun.core.image_preparation import prepare_images, stage_prepared_images
from sparkrun.core.recipe import Recipe
from sparkrun.orchestration.primitives import build_ssh_kwargs

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
v = init_sparkrun(log_level="INFO")
parser = argparse.ArgumentParser()
parser.add_argument("--transfer-mode", default="local")
parser.add_argument("--offline", action="store_true")
parser.add_argument("--prepare-only", action="store_true")
parser.add_argument("recipe")
parser.add_argument("hosts", nargs="+")
args = parser.parse_args()
config = SparkrunConfig()
recipe = Recipe.load(args.recipe)
hosts = args.hosts
runtime = get_runtime(recipe.runtime, v)
ssh_kwargs = build_ssh_kwargs(config)
started = time.monotonic()
prepared = prepare_images(
    recipe,
    runtime,
    hosts,
    config=config,
    v=v,
    ssh_kwargs=ssh_kwargs,
    transfer_mode=args.transfer_mode,
    builder_context={"offline": True} if args.offline else {},
)
prepare_s = time.monotonic() - started
if args.prepare_only:
    print(json.dumps({"head_image": prepared.head_image, "images_by_node": list(prepared.images_by_node)}))
    sys.exit(0)
started = time.monotonic()
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
    transfer_mode=args.transfer_mode,
    offline=args.offline,
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
            "prepare_s": prepare_s,  # the builder (the build, here or on the head)
            "stage_s": time.monotonic() - started,  # the distribution (identity checks, save | ssh load)
        }
    )
)
