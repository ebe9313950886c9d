"""Launch profiles, `deploy/profiles.yaml`: `common:` with each profile's keys on top (maps merge by key)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from imgbuild.config.models import Strict
from imgbuild.config.yamlsrc import YamlDoc, load_yaml, validate
from imgbuild.errors import ConfigError, UsageError, unknown_name

PROFILES_FILE = Path("deploy") / "profiles.yaml"
ULIMITS = ("nofile", "memlock", "stack", "core", "nproc", "rtprio", "msgqueue")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Serve(Strict):
    """`vllm serve` arguments, named as sparkrun's recipe `defaults:` name them."""

    tensor_parallel: Annotated[int, Field(ge=1)] | None = None
    pipeline_parallel: Annotated[int, Field(ge=1)] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    max_model_len: Annotated[int, Field(ge=1)] | None = None
    max_num_seqs: Annotated[int, Field(ge=1)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=1)] | None = None
    block_size: Annotated[int, Field(ge=1)] | None = None
    distributed_executor_backend: Literal["mp", "ray"] | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    speculative_config: dict[str, Any] | None = None
    compilation_config: dict[str, Any] | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    enforce_eager: bool | None = None
    trust_remote_code: bool | None = None
    enable_auto_tool_choice: bool | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None


class Limits(Strict):
    ulimits: dict[str, int | list[int]] = Field(default_factory=dict)
    cap_add: list[str] = Field(default_factory=list)
    memory: Annotated[str, Field(pattern=r"^[0-9]+[bkmg]?$")] | None = None
    shm_size: Annotated[str, Field(pattern=r"^[0-9]+[bkmg]?$")] | None = None

    @field_validator("ulimits")
    @classmethod
    def _ulimits(cls, value: dict[str, int | list[int]]) -> dict[str, int | list[int]]:
        for name, limit in value.items():
            if name not in ULIMITS:
                raise ValueError(unknown_name("ulimit", name, ULIMITS))
            if isinstance(limit, list) and len(limit) != 2:
                raise ValueError(f"ulimit {name}: give one number or [soft, hard], not {limit}")
        return value

    @field_validator("cap_add")
    @classmethod
    def _caps(cls, value: list[str]) -> list[str]:
        for cap in value:
            if not re.match(r"^[A-Z_]+$", cap) or cap.startswith("CAP_"):
                raise ValueError(f"capability {cap!r}: write it as docker does, e.g. IPC_LOCK")
        return value


class Part(Strict):
    """Keys of `common:` and of each profile."""

    variant: str | None = None
    description: str = ""
    model: str | None = None
    served_model_name: str | None = None
    nodes: Annotated[int, Field(ge=1)] = 1
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    env: dict[str, str] = Field(default_factory=dict)
    volumes: list[str] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    serve: Serve = Field(default_factory=Serve)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not an environment variable name")
        return value


class ProfilesFile(Strict):
    common: Part = Field(default_factory=Part)
    profiles: dict[str, Part]


class Profile(Part):
    """One profile, merged: a variant and a model are required."""

    name: str
    where: str  # file:line of the profile, for errors about it
    variant: str
    model: str


def _merge(common: Part, own: Part) -> dict[str, Any]:
    base = common.model_dump(exclude_unset=True)
    mine = own.model_dump(exclude_unset=True)
    out = {**base, **mine}
    for key in ("env", "serve"):
        out[key] = {**base.get(key, {}), **mine.get(key, {})}
    return out


def load_profiles(root: Path) -> tuple[YamlDoc, ProfilesFile]:
    path = root / PROFILES_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: no launch profiles", hint="create deploy/profiles.yaml (see docs/launching.md)")
    doc = load_yaml(path)
    return doc, validate(doc, ProfilesFile)


def profile(root: Path, name: str) -> Profile:
    doc, data = load_profiles(root)
    if name not in data.profiles:
        raise UsageError(  # a name on the command line: a bad command line, exit 2
            f"{doc.path}: {unknown_name('profile', name, data.profiles)}",
            hint="profiles are the keys under `profiles:` in deploy/profiles.yaml",
        )
    where = doc.where(("profiles", name))
    merged = _merge(data.common, data.profiles[name])
    missing = [k for k in ("variant", "model") if not merged.get(k)]
    if missing:
        raise ConfigError(
            f"{where}: profile {name} has no {' and no '.join(missing)}",
            hint="set it in the profile or under `common:`",
        )
    return Profile.model_validate({**merged, "name": name, "where": where})
