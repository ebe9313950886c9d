"""`imgbuild recipe VARIANT --profile NAME`: a variant + a launch profile -> a sparkrun recipe that passes
`sparkrun recipe validate --strict`, pinning the image by an immutable tag or digest, never a moving tag."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field

from imgbuild.atomic import write_text
from imgbuild.deploy import identity
from imgbuild.deploy import profiles as deploy
from imgbuild.deploy.profiles import Profile
from imgbuild.engine import Engine
from imgbuild.errors import ConfigError, DockerError, RegistryError, UsageError
from imgbuild.patches.variants import ResolvedVariant
from imgbuild.project import Project
from imgbuild.registry import reference, tools
from imgbuild.shapes import dump

SHORT_FLAGS = {"tensor_parallel": "-tp", "pipeline_parallel": "-pp"}
NEGATABLE = frozenset({"enable_prefix_caching", "enable_chunked_prefill"})
IMMUTABLE_TAG = re.compile(r"-([0-9a-f]{12})$")  # <version>-<inputs[:12]>
LEFT_TO_SPARKRUN = (
    "Not in env: {}: sparkrun detects these per cluster from its InfiniBand/CX7 probe\n"
    "(a recipe value would override that). The other NCCL settings (channels, buffer size, RoCE version,\n"
    "address family, NVLS, cuMem) are the deployment report's tuning, which sparkrun does not detect: kept."
)

# The oldest sparkrun that runs a `builder: imgbuild` recipe: 0.4.0 brought what the plugin uses (installed-plugin
# discovery through the `sparkrun.plugins` entry point, `core/installed_plugins.py`; the builder's `pull_ref`;
# `builder_context` with `offline`; `min_sparkrun_version` itself); 0.3.0 has none of them (checked in their wheels).
MIN_SPARKRUN_BUILDER = "0.4.0"

# sparkrun 0.4.2's orchestration/infiniband.py MANAGED_COMM_ENV_KEYS: what it sets per cluster from its
# probe; a recipe value would override the detection (its `managed-comm-env` warning). Checked against
# sparkrun's own set in tests/git/test_sparkrun.py.
SPARKRUN_MANAGED_ENV = frozenset(
    {
        "NCCL_IGNORE_CPU_AFFINITY",
        "NCCL_NET",
        "NCCL_IB_DISABLE",
        "NCCL_CROSS_NIC",
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
        "NODE_IP",
        "MN_IF_NAME",
        "OMPI_MCA_btl_tcp_if_include",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "NCCL_NET_PLUGIN",
        "NCCL_IB_SUBNET_AWARE_ROUTING",
        "NCCL_IB_MERGE_NICS",
    }
)


def serve_defaults(p: Profile) -> dict[str, Any]:
    """The recipe's `defaults:`: sparkrun builds `vllm serve` from these."""
    named = {"served_model_name": p.served_model_name} if p.served_model_name else {}
    return {**named, "port": p.port, **p.serve.model_dump(exclude_none=True)}


def flag_args(defaults: dict[str, Any]) -> list[str]:
    """`vllm serve` flags as sparkrun spells them: `-tp`, JSON without spaces, `--no-X` for default-on booleans."""
    args: list[str] = []
    for key, value in defaults.items():
        flag = SHORT_FLAGS.get(key, "--" + key.replace("_", "-"))
        if isinstance(value, bool):
            if value:
                args.append(flag)
            elif key in NEGATABLE:
                args.append("--no-" + flag[2:])
            continue
        if isinstance(value, dict | list):
            value = json.dumps(value, separators=(",", ":"))
        args += [flag, str(value)]
    return args


def immutable_ref(repository: str | None, tags: tuple[str, ...], inputs: str | None) -> str | None:
    """The image's `REPO:<version>-<inputs digest>` tag (in `repository` when given) whose digest is the
    `imgbuild.inputs` label's: a tag that only looks immutable is not taken."""
    want = (inputs or "").removeprefix("sha256:")[:12] or None
    for ref in sorted(tags):
        repo, _, tag = ref.rpartition(":")
        if "/" in tag or not repo or (repository and repo != repository):
            continue
        m = IMMUTABLE_TAG.search(tag)
        if m and (want is None or m.group(1) == want):
            return ref
    return None


@dataclass(frozen=True)
class Pinned:
    """The image a launch runs: a digest-pinned reference, never a moving tag."""

    ref: str  # REPO:<version>-<inputs digest> (immutable tag) or [REGISTRY/]REPO@sha256:<digest>
    image_id: str | None  # the local image id, when known
    source: str  # how it was found, e.g. "local vllm-dsv41:latest"


@dataclass(frozen=True, kw_only=True)
class RecipeWritten:
    """A written recipe as `recipe --json` prints it: the pinned image by its parts, the env split into what the
    recipe carries and what is left to sparkrun, and the serve command line."""

    ok: Literal[True] = True
    variant: str
    profile: str
    image: str
    image_id: str | None
    found: str
    platform: str
    env: dict[str, str]
    recipe_env: dict[str, str]
    left_to_sparkrun: list[str]
    builder: Annotated[
        dict[str, str] | None, Field(description="`builder_config:` (with `builder: imgbuild`), or null")
    ]
    serve: Annotated[list[str], Field(description="the `vllm serve` command line")]
    recipe: str


@dataclass(frozen=True)
class Recipe:
    """A written recipe: the variant, profile and pinned image, and where it was written."""

    variant: str
    profile: Profile
    image: Pinned
    platform: str
    env: dict[str, str]  # image env, then the profile's
    builder: dict[str, str] | None  # `builder_config:` (`builder: imgbuild`), or None
    path: Path

    def recipe_env(self) -> dict[str, str]:
        """The env a sparkrun recipe carries: everything but what sparkrun detects per cluster."""
        return {k: v for k, v in self.env.items() if k not in SPARKRUN_MANAGED_ENV}

    def left_to_sparkrun(self) -> list[str]:
        return sorted(k for k in self.env if k in SPARKRUN_MANAGED_ENV)

    def written(self) -> RecipeWritten:
        """What `recipe --json` prints of it."""
        return RecipeWritten(
            variant=self.variant,
            profile=self.profile.name,
            image=self.image.ref,
            image_id=self.image.image_id,
            found=self.image.source,
            platform=self.platform,
            env=self.env,
            recipe_env=self.recipe_env(),
            left_to_sparkrun=self.left_to_sparkrun(),
            builder=self.builder,
            serve=["vllm", "serve", self.profile.model, *flag_args(serve_defaults(self.profile))],
            recipe=str(self.path),
        )

    def document(self) -> dict[str, Any]:
        """The sparkrun recipe itself."""
        p, limits = self.profile, self.profile.limits
        executor = {
            "ulimit": [f"{k}={v[0]}:{v[1]}" if isinstance(v, list) else f"{k}={v}" for k, v in limits.ulimits.items()],
            "cap_add": list(limits.cap_add),
            "memory_limit": limits.memory,
            "shm_size": limits.shm_size,
            "volumes": list(p.volumes),
        }
        summary = dump(self.written())
        meta = {
            k: summary[k] for k in ("variant", "profile", "image", "image_id", "found", "platform", "left_to_sparkrun")
        }
        return {
            "recipe_version": "2",
            "description": f"{self.variant} image, profile {p.name}" + (f": {p.description}" if p.description else ""),
            "model": p.model,
            "runtime": "vllm",
            "min_nodes": p.nodes,
            "max_nodes": p.nodes,
            "container": self.image.ref,
            **(
                {"builder": "imgbuild", "builder_config": self.builder, "min_sparkrun_version": MIN_SPARKRUN_BUILDER}
                if self.builder
                else {}
            ),
            "env": self.recipe_env(),
            "defaults": serve_defaults(p),
            "executor_config": {k: v for k, v in executor.items() if v},
            "metadata": {"imgbuild": meta},
        }

    def text(self) -> str:
        """The recipe as written: a comment (how it was made, what sparkrun sets itself), then the YAML."""
        left = self.left_to_sparkrun()
        comment = [
            f"Written by `imgbuild recipe {self.variant} --profile {self.profile.name}`; regenerate, do not edit.",
            f"Image: {self.image.ref} ({self.image.source}).",
            *([LEFT_TO_SPARKRUN.format(", ".join(left))] if left else []),
            "Run: sparkrun run THIS_FILE --hosts H1,...,H8",
        ]
        body = yaml.safe_dump(self.document(), sort_keys=False, default_flow_style=False, width=1000)
        return "".join(f"# {line}\n" for line in "\n".join(comment).splitlines()) + body


def merged_env(variant: ResolvedVariant, profile: deploy.Profile) -> dict[str, str]:
    image_env = dict(variant.image.env)
    clash = sorted(set(image_env) & set(profile.env))
    if clash:
        raise ConfigError(
            f"{profile.where}: env {', '.join(clash)} is set by the image spec of {variant.name} (images/)",
            hint="set it in images/*.yaml only, so the image and its launch agree",
        )
    return {**image_env, **profile.env}


def _variant_tag(variant: ResolvedVariant, repository: str | None = None) -> str:
    """`REPO:TAG`, the variant's first tag (in `repository`, --repository, when given)."""
    repo = repository or variant.image.repository
    if not repo or not variant.image.tags:
        raise ConfigError(f"variant {variant.name} has no image repository or tag", hint="set image: in images/")
    return f"{repo}:{variant.image.tags[0]}"


def pin_image(
    variant: ResolvedVariant, *, image: str | None, registry: str | None, repository: str | None = None
) -> tuple[Pinned, str | None]:
    """The digest-pinned reference, and the image's platform when it was looked at. `repository`: the
    image's repository (--repository), locally and under `registry`, instead of image.repository."""
    if registry is not None:
        if image is not None:
            raise UsageError("--image and --registry cannot be used together")
        ref = reference.join(registry, _variant_tag(variant, repository))
        found = tools.inspect(str(ref))
        if found is None:
            raise RegistryError(
                f"{ref} is not in the registry",
                hint=f"publish it first: imgbuild publish {variant.name} --registry ...",
            )
        return Pinned(f"{ref.name}@{found.digest}", None, f"published {ref}"), None
    if image is not None and "@sha256:" in image:
        reference.parse(image)  # a ConfigError names what is wrong with it
        return Pinned(image, None, "given"), None
    wanted = image or _variant_tag(variant, repository)
    engine = Engine.connect()
    info = engine.image(wanted)
    if info is None:
        raise DockerError(
            f"no image {wanted!r} in the local image store",
            hint=f"build it (`imgbuild build {variant.name}`), or give --image or --registry",
        )
    label = info.labels.get("imgbuild.variant")
    if image is None and label != variant.name:
        raise DockerError(
            f"{wanted} is not an imgbuild image of variant {variant.name} (label imgbuild.variant={label!r})",
            hint=f"rebuild it with `imgbuild build {variant.name}`, or name the image with --image",
        )
    repository = None if image else repository or variant.image.repository
    tagged = immutable_ref(repository, info.tags, info.labels.get("imgbuild.inputs"))
    if tagged is None and label:  # a join's tag: its digest is its parts', not its label's (deploy/identity.py)
        tagged = identity.join_ref(repository, info, engine.labelled("imgbuild.variant", label))
    if tagged is None:
        raise DockerError(
            f"{wanted} ({info.id[7:19]}) has no immutable tag (REPO:<version>-<inputs digest>); a bare image id "
            "has no repository, so sparkrun's distribution could not tag it on a node",
            hint=f"build it with `imgbuild build {variant.name}` (it tags it), or pin a published image: --registry",
        )
    return Pinned(tagged, info.id, f"local {wanted}"), str(info.platform)


def write_recipe(
    project: Project,
    variant_name: str,
    profile_name: str,
    *,
    out: Path,
    image: str | None = None,
    registry: str | None = None,
    repository: str | None = None,
    builder: bool = False,
    pinned: Pinned | None = None,
    path: Path | None = None,
    write: bool = True,
) -> Recipe:
    """The recipe, written to `path` (default: `out/<variant>-<profile>.yaml`) unless `write` is off. `pinned`: the
    image a caller already chose (rollback's target), instead of looking for one."""
    variant = project.variant(variant_name)
    profile = deploy.profile(project.root, profile_name)
    if profile.variant != variant.name:
        raise ConfigError(
            f"{profile.where}: profile {profile.name} runs variant {profile.variant}, not {variant.name}",
            hint=f"use `imgbuild recipe {profile.variant} --profile {profile.name}`, or change the profile's variant",
        )
    env = merged_env(variant, profile)
    if builder and image is not None:
        raise UsageError("--builder cannot be used with --image: the builder makes the image")
    seen_platform = None
    if builder:  # `container:` names the variant's tag; the builder replaces it with the one it builds
        pinned = Pinned(
            _variant_tag(variant, repository), None, "builder imgbuild (replaced by the immutable tag it builds)"
        )
    elif pinned is None:
        pinned, seen_platform = pin_image(variant, image=image, registry=registry, repository=repository)
    platform = seen_platform or (str(variant.image.platforms[0]) if variant.image.platforms else "linux/arm64")
    config = {"project": str(project.root), "variant": variant.name, "platform": platform} if builder else None
    if config is not None and registry is not None:  # the builder runs the variant published there (pull_ref)
        config["registry"] = registry
    path = path or out / f"{variant.name}-{profile.name.lower()}.yaml"
    recipe = Recipe(variant.name, profile, pinned, platform, env, config, path)
    if write:
        write_text(path, recipe.text())
    return recipe
