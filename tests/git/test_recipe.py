"""`imgbuild recipe`: profiles, pinning, rendering (fast tier; sparkrun and a local image: tests/docker)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from imgbuild.deploy import profiles as deploy
from imgbuild.deploy import recipes
from imgbuild.deploy.recipes import immutable_ref, write_recipe
from imgbuild.errors import ConfigError, DockerError, UsageError
from imgbuild.project import Project
from tests.support.runner import imgbuild_here
from tests.support.synth import Upstream
from tests.support.synth_images import engram_project, release

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
PINNED = f"127.0.0.1:5000/vllm-dsv41@{DIGEST}"


@pytest.fixture
def synth(tmp_path: Path, upstream: Upstream) -> Path:
    release(upstream)
    root = engram_project(tmp_path / "p", upstream, "imgbuild-test-recipe")
    (root / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "profiles.yaml", root / "deploy" / "profiles.yaml")
    return root


def write_profiles(root: Path, text: str) -> Path:
    path = root / "deploy" / "profiles.yaml"
    path.write_text(text)
    return path


def test_shipped_profiles_are_the_seed_configurations() -> None:
    one = deploy.profile(ROOT, "TP8-1M")
    mem = deploy.profile(ROOT, "TP8-300K")
    assert (one.variant, mem.variant) == ("latest", "engram-mem")
    assert (one.serve.gpu_memory_utilization, mem.serve.gpu_memory_utilization) == (0.75, 0.80)
    assert (one.serve.max_model_len, mem.serve.max_model_len) == (1048576, 300000)
    for p in (one, mem):
        assert p.nodes == 8 and p.serve.tensor_parallel == 8 and p.serve.block_size == 128
        assert p.serve.distributed_executor_backend == "mp"
        assert p.serve.speculative_config == {
            "method": "dspark",
            "num_speculative_tokens": 5,
            "draft_sample_method": "probabilistic",
            "rejection_sample_method": "block",
            "enable_adaptive_verification": False,
        }
        assert p.limits.ulimits == {"nofile": [1048576, 1048576], "memlock": [-1, -1], "stack": 67108864}
        assert p.limits.cap_add == ["IPC_LOCK"] and p.limits.memory == "112g"
        assert p.env["NCCL_MAX_NCHANNELS"] == "8" and p.env["NCCL_BUFFSIZE"] == "1048576"
    assert mem.env["VLLM_FLASHINFER_AUTOTUNE"] == "0" and "VLLM_FLASHINFER_AUTOTUNE" not in one.env


def test_real_project_recipes_pin_and_take_env_from_the_image_spec(tmp_path: Path) -> None:
    project = Project.load(ROOT)
    for variant, profile in (("latest", "TP8-1M"), ("engram-mem", "TP8-300K")):
        done = write_recipe(project, variant, profile, out=tmp_path, image=PINNED)
        recipe = yaml.safe_load(done.path.read_text())
        assert recipe["container"] == PINNED
        assert recipe["env"] == {k: v for k, v in done.env.items() if k not in recipes.SPARKRUN_MANAGED_ENV}
        assert ("DSV41_ENGRAM_DISK" in recipe["env"]) == (variant == "latest")  # images/engram-mem.yaml removes it
        assert recipe["min_nodes"] == recipe["max_nodes"] == 8 and "mode" not in recipe
        assert recipe["executor_config"] == {
            "ulimit": ["nofile=1048576:1048576", "memlock=-1:-1", "stack=67108864"],
            "cap_add": ["IPC_LOCK"],
            "memory_limit": "112g",
        }
        assert done.written().serve[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V4.1-Flash"]
        assert "&id" not in done.path.read_text()


def test_a_moving_tag_is_never_written(tmp_path: Path) -> None:
    project = Project.load(ROOT)
    done = write_recipe(project, "latest", "TP8-1M", out=tmp_path, image=PINNED)
    refs = re.findall(r"(?:container|image): (\S+)", done.path.read_text())
    assert refs and all("@sha256:" in r and not r.startswith("sha256:") for r in refs)
    with pytest.raises(ConfigError, match="is not a sha256 digest"):
        write_recipe(project, "latest", "TP8-1M", out=tmp_path, image="vllm-dsv41@sha256:latest")


def test_a_bare_image_id_is_never_written(tmp_path: Path) -> None:
    """An id is resolved to the image's immutable tag (tests/docker); one that is not there is an error."""
    with pytest.raises(DockerError):
        write_recipe(Project.load(ROOT), "latest", "TP8-1M", out=tmp_path, image="sha256:" + "ab" * 32)
    assert not list(tmp_path.iterdir())


def test_the_immutable_tag_is_found_among_the_images_tags() -> None:
    tags = ("vllm-dsv41:latest", "vllm-dsv41:0.33.0-0123456789ab", "other:0.33.0-0123456789ab")
    assert immutable_ref("vllm-dsv41", tags, "sha256:0123456789ab" + "0" * 52) == "vllm-dsv41:0.33.0-0123456789ab"
    assert immutable_ref(None, tags[2:], None) == "other:0.33.0-0123456789ab"
    assert immutable_ref("vllm-dsv41", tags, "sha256:" + "f" * 64) is None  # the label disagrees with the tag
    assert immutable_ref("vllm-dsv41", ("vllm-dsv41:latest",), None) is None
    assert (
        immutable_ref(None, ("127.0.0.1:5000/r:0.33.0-0123456789ab",), None) == "127.0.0.1:5000/r:0.33.0-0123456789ab"
    )
    assert immutable_ref(None, ("r:0.33.0-0123456789ab-arm64",), None) is None  # the old -<arch> tags are gone


def test_builder_recipe_names_the_project_and_variant(tmp_path: Path) -> None:
    done = write_recipe(Project.load(ROOT), "engram-mem", "TP8-300K", out=tmp_path, builder=True)
    recipe = yaml.safe_load(done.path.read_text())
    assert (recipe["builder"], recipe["container"]) == ("imgbuild", "vllm-dsv41:engram-mem")
    assert recipe["builder_config"]["variant"] == "engram-mem" and recipe["builder_config"]["project"] == str(ROOT)
    with pytest.raises(UsageError, match="--builder cannot be used with --image"):
        write_recipe(Project.load(ROOT), "latest", "TP8-1M", out=tmp_path, image=PINNED, builder=True)


def test_bad_profile_key_is_named_at_file_line_col(synth: Path) -> None:
    text = (synth / "deploy" / "profiles.yaml").read_text()
    path = write_profiles(synth, text.replace("gpu_memory_utilization: 0.75", "gpu_memory_utilisation: 0.75"))
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "gpu_memory_utilisation" in ln)
    with pytest.raises(ConfigError) as exc:
        deploy.profile(synth, "TP8-1M")
    msg = exc.value.message
    assert f"{path}:{line}:" in msg
    assert "profiles.TP8-1M.serve.gpu_memory_utilisation: unknown key" in msg
    assert "did you mean 'gpu_memory_utilization'" in msg


def test_bad_values_are_named_too(synth: Path) -> None:
    path = write_profiles(
        synth,
        "profiles:\n  X:\n    variant: latest\n    model: m\n    limits:\n      ulimits:\n        nofiles: 5\n"
        "      cap_add: [CAP_IPC_LOCK]\n    serve:\n      gpu_memory_utilization: 1.5\n",
    )
    with pytest.raises(ConfigError) as exc:
        deploy.profile(synth, "X")
    msg = exc.value.message
    assert f"{path}:7:" in msg and "unknown ulimit 'nofiles' (did you mean 'nofile'?)" in msg
    assert "write it as docker does, e.g. IPC_LOCK" in msg
    assert f"{path}:10:" in msg and "less than or equal to 1" in msg


def test_unknown_profile_missing_model_and_wrong_variant(synth: Path, tmp_path: Path) -> None:
    project = Project.load(synth)
    with pytest.raises(UsageError, match="unknown profile 'TP8-1m' \\(did you mean 'TP8-1M'\\?\\)"):
        deploy.profile(synth, "TP8-1m")
    with pytest.raises(ConfigError, match="profile TP8-1M runs variant latest, not engram-mem"):
        write_recipe(project, "engram-mem", "TP8-1M", out=tmp_path, image=PINNED)
    path = write_profiles(synth, "profiles:\n  X:\n    variant: latest\n")
    with pytest.raises(ConfigError, match=f"{path}:3:.*profile X has no model"):
        deploy.profile(synth, "X")


def test_profile_may_not_override_the_image_env(synth: Path, tmp_path: Path) -> None:
    write_profiles(
        synth, "profiles:\n  X:\n    variant: latest\n    model: m\n    env:\n      DSV41_ENGRAM_DISK: '0'\n"
    )
    with pytest.raises(ConfigError, match="env DSV41_ENGRAM_DISK is set by the image spec of latest"):
        write_recipe(Project.load(synth), "latest", "X", out=tmp_path, image=PINNED)


def test_one_node_profile_has_no_multi_node_flags(synth: Path, tmp_path: Path) -> None:
    write_profiles(
        synth,
        "profiles:\n  solo:\n    variant: latest\n    model: m\n    serve:\n      enable_prefix_caching: false\n"
        "      enforce_eager: true\n      trust_remote_code: false\n",
    )
    done = write_recipe(Project.load(synth), "latest", "solo", out=tmp_path, image=PINNED)
    assert done.written().serve == [
        "vllm", "serve", "m", "--port", "8000", "--no-enable-prefix-caching", "--enforce-eager",
    ]  # fmt: skip
    recipe = yaml.safe_load(done.path.read_text())
    assert "mode" not in recipe and recipe["min_nodes"] == recipe["max_nodes"] == 1


def test_flag_rendering_matches_sparkruns_spelling() -> None:
    args = recipes.flag_args({"tensor_parallel": 8, "speculative_config": {"a": 1, "b": False}, "x_y": 0.8})
    assert args == ["-tp", "8", "--speculative-config", '{"a":1,"b":false}', "--x-y", "0.8"]


@pytest.mark.parametrize("command", [["recipe"]])
def test_new_commands_have_help_with_examples(command: list[str]) -> None:
    proc = imgbuild_here(None, *command, "--help")  # in-process: the help text, not start-up, is under test
    assert proc.returncode == 0 and "Examples:" in proc.stdout and "--json" in proc.stdout
    listed = imgbuild_here(None, "--help")
    assert command[0] in listed.stdout
