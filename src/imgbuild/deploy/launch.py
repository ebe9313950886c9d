"""A variant + a launch profile -> a sparkrun recipe (pure).

The recipe pins the image (a repository reference sparkrun's distribution can tag on a node), carries
the variant's env plus the profile's, the container limits, and the `vllm serve` arguments as sparkrun's
`defaults:` keys. It passes sparkrun's `recipe validate --strict`: the node range is `min_nodes`/`max_nodes`,
and the communication variables sparkrun detects per cluster (SPARKRUN_MANAGED_ENV) are left to it.
With `builder: imgbuild`, the builder plugin (`imgbuild.deploy.sparkrun_builder`) replaces `container:`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from imgbuild.deploy.profiles import Profile

SHORT_FLAGS = {"tensor_parallel": "-tp", "pipeline_parallel": "-pp"}
NEGATABLE = frozenset({"enable_prefix_caching", "enable_chunked_prefill"})
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


@dataclass(frozen=True)
class Pinned:
    """The image a launch runs: a digest-pinned reference, never a moving tag."""

    ref: str  # REPO:<version>-<inputs digest> (immutable tag) or [REGISTRY/]REPO@sha256:<digest>
    image_id: str | None  # the local image id, when known
    source: str  # how it was found, e.g. "local vllm-dsv41:latest"


@dataclass(frozen=True)
class Builder:
    """`builder: imgbuild` in the recipe: sparkrun builds the variant through imgbuild at launch."""

    project: str  # the imgbuild project (a directory)
    variant: str
    platform: str | None = None

    def config(self) -> dict[str, str]:
        out = {"project": self.project, "variant": self.variant}
        return {**out, "platform": self.platform} if self.platform else out


@dataclass(frozen=True)
class Launch:
    variant: str
    profile: Profile
    image: Pinned
    platform: str
    env: dict[str, str]  # image env, then the profile's
    builder: Builder | None = None

    def recipe_env(self) -> dict[str, str]:
        """The env a sparkrun recipe carries: everything but what sparkrun detects per cluster."""
        return {k: v for k, v in self.env.items() if k not in SPARKRUN_MANAGED_ENV}

    def left_to_sparkrun(self) -> list[str]:
        return sorted(k for k in self.env if k in SPARKRUN_MANAGED_ENV)


def serve_defaults(p: Profile) -> dict[str, Any]:
    """The recipe's `defaults:`: sparkrun builds `vllm serve` from these."""
    out: dict[str, Any] = {}
    if p.served_model_name:
        out["served_model_name"] = p.served_model_name
    out["port"] = p.port
    out.update(p.serve.model_dump(exclude_none=True))
    return out


def flag_args(defaults: dict[str, Any]) -> list[str]:
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


def serve_args(p: Profile) -> list[str]:
    return ["vllm", "serve", p.model, *flag_args(serve_defaults(p))]


def sparkrun_recipe(launch: Launch) -> dict[str, Any]:
    p = launch.profile
    limits = p.limits
    executor: dict[str, Any] = {}
    if limits.ulimits:
        executor["ulimit"] = [
            f"{k}={v[0]}:{v[1]}" if isinstance(v, list) else f"{k}={v}" for k, v in limits.ulimits.items()
        ]
    if limits.cap_add:
        executor["cap_add"] = list(limits.cap_add)
    if limits.memory:
        executor["memory_limit"] = limits.memory
    if limits.shm_size:
        executor["shm_size"] = limits.shm_size
    if p.volumes:
        executor["volumes"] = list(p.volumes)
    recipe: dict[str, Any] = {
        "recipe_version": "2",
        "description": f"{launch.variant} image, profile {p.name}" + (f": {p.description}" if p.description else ""),
        "model": p.model,
        "runtime": "vllm",
        "min_nodes": p.nodes,
        "max_nodes": p.nodes,
        "container": launch.image.ref,
    }
    if launch.builder is not None:
        recipe["builder"] = "imgbuild"
        recipe["builder_config"] = launch.builder.config()
    recipe.update(
        {
            "env": launch.recipe_env(),
            "defaults": serve_defaults(p),
            "executor_config": executor,
            "metadata": {
                "imgbuild": {
                    "variant": launch.variant,
                    "profile": p.name,
                    "image": launch.image.ref,
                    "image_id": launch.image.image_id,
                    "found": launch.image.source,
                    "platform": launch.platform,
                    "left_to_sparkrun": launch.left_to_sparkrun(),
                }
            },
        }
    )
    return recipe


def recipe_comment(launch: Launch) -> str:
    """Why the recipe's env lacks some of the variant's variables: sparkrun sets them itself."""
    left = launch.left_to_sparkrun()
    if not left:
        return ""
    return (
        f"Not in env: {', '.join(left)}: sparkrun detects these per cluster from its InfiniBand/CX7 probe\n"
        "(a recipe value would override that). The other NCCL settings (channels, buffer size, RoCE version,\n"
        "address family, NVLS, cuMem) are the deployment report's tuning, which sparkrun does not detect: kept."
    )


def render_yaml(data: dict[str, Any], comment: str) -> str:
    body = yaml.dump(data, Dumper=yaml.SafeDumper, sort_keys=False, default_flow_style=False, width=1000)
    return "".join(f"# {line}\n" for line in comment.splitlines()) + body
