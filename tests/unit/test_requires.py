"""Pins that depend on each other (upstream/requires.py): each release's Requires-Dist against the other pins,
the `override:` of patches/upstream.yaml, and which pins a bump moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.config.models import UpstreamPin, load_pins
from imgbuild.errors import ConfigError
from imgbuild.upstream.requires import (
    Unmet,
    metadata_requires,
    needs,
    overrides_in_effect,
    plan_moves,
    problems,
)
from imgbuild.workflows.writeback import drop_override

SHA = "0" * 64


def pin(name: str, project: str, version: str, platform: str = "any", **more: object) -> UpstreamPin:
    return UpstreamPin.model_validate(
        {
            "name": name,
            "package_root": name,
            "tag": f"v{version}",
            "commit": "1" * 40,
            "source": {
                "kind": "wheel",
                "project": project,
                "version": version,
                "platform": platform,
                "filename": f"{project}-{version}-py3-none-any.whl",
                "sha256": SHA,
            },
            **more,
        }
    )


OVERRIDE = {"requirement": "flashinfer-python==0.7.3", "version": "0.7.4", "reason": "the index has no 0.7.3"}
VLLM = pin("vllm", "vllm", "0.34.0", "manylinux_2_28_aarch64")
REQUIRES = {"vllm": ("torch==2.14.0", "flashinfer-python==0.7.3", 'zentorch==2.14.0.2; extra == "zen"')}


def test_metadata_requires_reads_requires_dist() -> None:
    text = b"Name: vllm\nRequires-Dist: torch==2.14.0\nRequires-Dist: flashinfer-python==0.7.3\n\nbody"
    assert metadata_requires(text) == ("torch==2.14.0", "flashinfer-python==0.7.3")


def test_a_pin_that_lacks_the_required_version_is_named() -> None:
    fi = pin("flashinfer", "flashinfer-python", "0.7.2.post1")
    [need] = needs([VLLM, fi], REQUIRES)
    assert need.status == "mismatch" and not need.ok
    assert need.message == "vLLM 0.34.0 requires flashinfer-python==0.7.3; the flashinfer pin is 0.7.2.post1"
    assert problems([VLLM, fi], [need]) == [need.message]


def test_a_met_requirement_and_markers() -> None:
    fi = pin("flashinfer", "flashinfer_python", "0.7.3")  # spelled with _: the same project
    requires = {"vllm": ("flashinfer-python==0.7.3", 'flashinfer-python==9; platform_machine == "x86_64"')}
    [need] = needs([VLLM, fi], requires)  # the x86_64-only line is not the aarch64 wheel's
    assert need.status == "ok" and problems([VLLM, fi], [need]) == []


def test_an_override_replaces_exactly_its_requirement() -> None:
    fi = pin("flashinfer", "flashinfer-python", "0.7.4", override=OVERRIDE)
    [need] = needs([VLLM, fi], REQUIRES)
    assert need.status == "overridden" and need.override is not None
    assert "overridden: the flashinfer pin is 0.7.4 (patches/upstream.yaml: the index has no 0.7.3)" in need.message
    assert problems([VLLM, fi], [need]) == []
    assert overrides_in_effect([need]) == ["flashinfer-python==0.7.4"]
    # the same override against another requirement replaces nothing: a mismatch, and the override is stale
    other = needs([VLLM, fi], {"vllm": ("flashinfer-python==0.7.5",)})
    assert other[0].status == "mismatch"
    found = problems([VLLM, fi], other)
    assert len(found) == 2 and "replaces nothing" in found[1] and overrides_in_effect(other) == []


def test_plan_moves_to_the_newest_meeting_version_else_the_override_else_unmet() -> None:
    fi = pin("flashinfer", "flashinfer-python", "0.7.2.post1")
    found = needs([VLLM, fi], REQUIRES)
    [move] = plan_moves([VLLM, fi], found, lambda _p: ["0.7.4", "0.7.3", "0.7.2.post1"])
    assert (move.pin, move.old, move.new, move.by_override) == ("flashinfer", "0.7.2.post1", "0.7.3", False)
    with pytest.raises(Unmet) as err:
        plan_moves([VLLM, fi], found, lambda _p: ["0.7.4", "0.7.2.post1"])
    assert "requires flashinfer-python==0.7.3" in str(err.value) and "it has: 0.7.4, 0.7.2.post1" in str(err.value)
    with_override = pin("flashinfer", "flashinfer-python", "0.7.2.post1", override=OVERRIDE)
    found = needs([VLLM, with_override], REQUIRES)
    [move] = plan_moves([VLLM, with_override], found, lambda _p: ["0.7.4", "0.7.2.post1"])
    assert (move.new, move.by_override, move.drop_override) == ("0.7.4", True, False)
    with pytest.raises(Unmet, match=r"override names 0\.7\.4, which it lacks"):
        plan_moves([VLLM, with_override], found, lambda _p: ["0.7.2.post1"])


def test_the_bump_that_finds_the_required_version_drops_the_override() -> None:
    fi = pin("flashinfer", "flashinfer-python", "0.7.4", override=OVERRIDE)
    found = needs([VLLM, fi], REQUIRES)  # overridden now
    assert plan_moves([VLLM, fi], found, lambda _p: ["0.7.4"]) == []
    [move] = plan_moves([VLLM, fi], found, lambda _p: ["0.7.4", "0.7.3"])
    assert (move.new, move.drop_override) == ("0.7.3", True)


@pytest.mark.parametrize(
    ("override", "expect"),
    [
        ({**OVERRIDE, "reason": " "}, "an override needs its reason"),
        ({**OVERRIDE, "requirement": "flashinfer-python"}, "names no version"),
        ({**OVERRIDE, "requirement": "torch==2.14.0"}, "is not on this pin's project"),
        ({**OVERRIDE, "version": "latest"}, "is not a release version"),
        ({**OVERRIDE, "because": "x"}, "unknown key 'because'"),
    ],
)
def test_a_bad_override_is_refused_at_its_line(tmp_path: Path, override: dict[str, str], expect: str) -> None:
    import yaml

    fi = pin("flashinfer", "flashinfer-python", "0.7.2.post1").model_dump(mode="json", exclude_none=True)
    top = VLLM.model_dump(mode="json", exclude_none=True)
    path = tmp_path / "upstream.yaml"
    path.write_text(yaml.safe_dump({**top, "also": [{**fi, "override": override}]}, sort_keys=False))
    with pytest.raises(ConfigError) as err:
        load_pins(path)
    assert expect in err.value.message and f"{path}:" in err.value.message


def test_drop_override_removes_only_that_block(tmp_path: Path) -> None:
    import yaml

    fi = pin("flashinfer", "flashinfer-python", "0.7.4").model_dump(mode="json", exclude_none=True)
    top = VLLM.model_dump(mode="json", exclude_none=True)
    plain = "# the pins\n" + yaml.safe_dump({**top, "also": [fi]}, sort_keys=False)
    text = plain + "  override:\n    requirement: flashinfer-python==0.7.3\n    version: 0.7.4\n    reason: x\n"
    path = tmp_path / "upstream.yaml"
    path.write_text(text)
    pins = load_pins(path)
    assert pins[1].override is not None
    assert drop_override(text, pins[1]) == plain


def test_the_newest_wheel_release_counts_post_releases_not_pre_releases() -> None:
    from imgbuild.upstream.refs import is_version, newest_release

    assert newest_release(["0.7.2", "0.7.2.post1", "0.8.0rc1", "0.7.10.dev0"]) == "0.7.2.post1"
    assert newest_release(["0.7.10", "0.7.9.post3", "junk"]) == "0.7.10"
    assert newest_release(["1.0rc1"]) is None
    assert is_version("0.7.2.post1") and is_version("v0.34.0") and not is_version("be4b59b0") and not is_version("x")
