"""A variant selection is resolved once (Project.select), and the dry run's JSON comes from the plan types.

The golden files in tests/git/golden/ are what `imgbuild build --dry-run --json --base base:1` printed before
the JSON moved from the CLI into `to_json()` of the plan types (commit a249940): the project below, with
its pin naming the fixed URL GOLDEN_URL (git's `insteadOf` maps it to this test's upstream, so the labels
and digests do not depend on tmp_path). `*-nodaemon`: no Docker daemon answered (base:1 unresolved). Since
BuildKit builds every image (issue 21) the plan carries `joins`, one per variant made for several platforms,
and a platform's tags have no `-<arch>` suffix; since each image is one BuildKit call (its base, one COPY
per layer, its metadata) the plan has no layer images, and an image lists its context.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgbuild.builder.options import BuildOptions
from imgbuild.builder.runner import dry_plan
from imgbuild.errors import ExitCode, UsageError
from imgbuild.jsondoc import document
from imgbuild.platforms import Platform
from imgbuild.project import Project
from imgbuild.shapes import dump
from tests.support.jsonschema_check import load_json
from tests.support.runner import Cli
from tests.support.synth import Upstream, make_project
from tests.support.synth_images import patches, release, variants

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_URL = "file:///imgbuild-golden/upstream"
BOTH = ["linux/arm64", "linux/amd64"]
ARM, AMD = (Platform.parse(p) for p in BOTH)


@pytest.fixture
def root(tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> Path:
    release(upstream)
    v = variants("vllm-test")
    for name in ("latest", "engram-mem"):
        v[name]["image"]["platforms"] = BOTH  # type: ignore[index]
    root = make_project(tmp_path / "p", upstream, "v1.0.0", patches(upstream), v)
    pin = root / "patches" / "upstream.yaml"
    pin.write_text(pin.read_text().replace(upstream.url, GOLDEN_URL))
    for key, value in _git_env(upstream).items():
        monkeypatch.setenv(key, value)
    return root


def _git_env(upstream: Upstream) -> dict[str, str]:
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{upstream.url}.insteadOf",
        "GIT_CONFIG_VALUE_0": GOLDEN_URL,
    }


@pytest.fixture
def project(root: Path) -> Project:
    return Project.load(root)


def golden(name: str) -> object:
    return json.loads((GOLDEN / f"dry_run_{name}.json").read_text())


# -- Project.select ------------------------------------------------------------------
def test_default_is_every_variant_in_chain_order_on_its_first_platform(project: Project) -> None:
    sel = project.select()
    assert sel.names == ("latest", "engram-mem")  # parents first, although engram-mem sorts first by name
    assert sel.platforms_of("latest") == (ARM,) and sel.platforms_of("engram-mem") == (ARM,)
    assert project.select(["engram-mem", "latest"]).names == ("engram-mem", "latest")  # as asked


def test_all_and_a_comma_list(project: Project) -> None:
    assert project.select(platform="all").platforms == (("engram-mem", (ARM, AMD)), ("latest", (ARM, AMD)))
    sel = project.select(["engram-mem"], "linux/amd64, linux/arm64")
    assert sel.names == ("engram-mem",)
    assert sel.platforms_of("engram-mem") == (AMD, ARM) == sel.platforms_of("latest")
    assert project.select(default="declared").platforms_of("latest") == (ARM, AMD)  # publish's default


def test_the_selection_travels_beside_the_plans_and_the_config_keeps_what_it_declares(project: Project) -> None:
    sel = project.select(["engram-mem"], "linux/amd64")
    assert sel.platforms_of("engram-mem") == sel.platforms_of("latest") == (AMD,)  # layers are planned over both
    plan = dry_plan(project, sel, BuildOptions(base="base:1"), None).plan
    assert [(ib.variant, ib.platform) for ib in plan.images] == [("engram-mem", AMD)]
    assert all(tuple(map(str, p.variant.image.platforms)) == tuple(BOTH) for p in project.plan())  # never narrowed


def test_an_unknown_variant_is_refused_with_did_you_mean(project: Project) -> None:
    with pytest.raises(UsageError, match=r"unknown variant 'engram-me'.*did you mean 'engram-mem'") as exc:
        project.select(["latest", "engram-me"])
    assert exc.value.exit_code == ExitCode.USAGE  # a name on the command line: exit 2, as the reference says


def test_an_unsupported_platform_is_refused_before_the_names(project: Project) -> None:
    with pytest.raises(UsageError, match=r"--platform linux/s390x: unsupported platform; known: linux/arm64") as exc:
        project.select(["no-such-variant"], "linux/arm64,linux/s390x")
    assert exc.value.exit_code == ExitCode.USAGE


def test_build_and_publish_report_a_bad_selection_with_their_exit_codes(root: Path, cli: Cli) -> None:
    out = cli(root, "build", "--dry-run", "--base", "base:1", "engram-me")
    assert out.returncode == ExitCode.USAGE and "did you mean 'engram-mem'" in out.stderr
    out = cli(root, "publish", "latest", "-r", "127.0.0.1:9", "--platform", "linux/s390x", "--dry-run")
    assert out.returncode == ExitCode.USAGE and "unsupported platform" in out.stderr


# -- the dry run's JSON, from the plan types -------------------------------------------
@pytest.mark.parametrize(
    ("names", "platform", "name"),
    [
        ([], None, "default-nodaemon"),
        (["engram-mem"], None, "one-nodaemon"),
        ([], "linux/amd64,linux/arm64", "comma-nodaemon"),
    ],
)
def test_dry_run_json_is_what_the_cli_printed_before(
    project: Project, names: list[str], platform: str | None, name: str
) -> None:
    dry = dry_plan(project, project.select(names, platform), BuildOptions(base="base:1"), None)
    assert dump(dry.plan.planned()) == golden(name)


def test_a_variant_made_for_several_platforms_is_joined_and_the_join_takes_its_moving_tags(project: Project) -> None:
    plan = dry_plan(project, project.select(platform="all"), BuildOptions(base="base:1"), None).plan
    assert [j.variant for j in plan.joins] == [ib.variant for ib in plan.images[::2]]
    for join in plan.joins:
        parts = [ib for ib in plan.images if ib.variant == join.variant]
        assert join.parts == tuple(parts) and [p.platform for p in parts] == [ARM, AMD]
        assert all(p.moving_refs == () for p in parts) and join.moving_refs
        assert len({p.immutable_ref for p in parts}) == 2  # each platform's image has its own immutable tag
        for p in parts:
            assert f"FROM {p.immutable_ref} AS image-{p.platform.arch}" in join.dockerfile


def test_build_dry_run_json_through_the_cli(root: Path, upstream: Upstream, tmp_path: Path, cli: Cli) -> None:
    env = {**_git_env(upstream), "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    out = cli(root, "build", "--dry-run", "--json", "--base", "base:1", env=env)
    assert out.returncode == 0, out.stderr
    assert load_json(out.stdout) == document("build-plan", golden("default-nodaemon"))
