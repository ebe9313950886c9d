"""image.entrypoint (keep | clear): parsing, inheritance, the rendered Dockerfile, and the decision
against the base's ENTRYPOINT (pure; the base's probe is in tests/docker/test_entrypoint_docker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.config.models import load_variant
from imgbuild.errors import ConfigError
from imgbuild.patches.variants import resolve_variants
from imgbuild.plan.dockerfile import render_image
from imgbuild.smoke import launchcheck

WRAPPER = ["/opt/nvidia/nvidia_entrypoint.sh"]


@pytest.mark.parametrize("value", ["keep", "clear"])
def test_entrypoint_keep_or_clear_parses(tmp_path: Path, value: str) -> None:
    p = tmp_path / "latest.yaml"
    p.write_text(f"name: latest\nimage:\n  entrypoint: {value}\n")
    assert load_variant(p).image.entrypoint == value


def test_an_unknown_entrypoint_value_is_refused_at_its_line(tmp_path: Path) -> None:
    p = tmp_path / "latest.yaml"
    p.write_text("name: latest\nimage:\n  repository: r\n  entrypoint: wrap\n")
    with pytest.raises(ConfigError, match=r"latest.yaml:4:15: image.entrypoint: .*'keep' or 'clear'"):
        load_variant(p)


def test_entrypoint_is_inherited_through_from(tmp_path: Path) -> None:
    (tmp_path / "latest.yaml").write_text("name: latest\nimage:\n  entrypoint: keep\n")
    (tmp_path / "mem.yaml").write_text("name: mem\nfrom: latest\n")
    (tmp_path / "other.yaml").write_text("name: other\nfrom: latest\nimage:\n  entrypoint: clear\n")
    configs = {p.stem: load_variant(p) for p in sorted(tmp_path.glob("*.yaml"))}
    resolved = resolve_variants(configs, [])
    assert (resolved["latest"].image.entrypoint, resolved["mem"].image.entrypoint) == ("keep", "keep")
    assert resolved["other"].image.entrypoint == "clear"


def test_keep_leaves_out_only_the_entrypoint_line() -> None:
    cleared = render_image("base:1", "/site", ["aaaa"], [], {"a": "1"})
    kept = render_image("base:1", "/site", ["aaaa"], [], {"a": "1"}, keep_entrypoint=True)
    assert cleared.splitlines()[-2:] == ["ENTRYPOINT []", "CMD []"]
    assert kept.splitlines() == [ln for ln in cleared.splitlines() if ln != "ENTRYPOINT []"]


def test_base_kind_from_the_probe() -> None:
    ran, ate = launchcheck.Probe(True, "/usr/bin/kill"), launchcheck.Probe(False, None)
    assert launchcheck.base_kind(None, None) == "none"
    assert launchcheck.base_kind(WRAPPER, ran) == "passthrough"
    assert launchcheck.base_kind(["vllm", "serve"], ate) == "consuming"
    assert launchcheck.known_consuming(["vllm", "serve"]) and launchcheck.known_consuming(["/usr/bin/vllm"])
    assert not launchcheck.known_consuming(WRAPPER)


def test_an_undecided_passthrough_entrypoint_is_an_error_that_explains_both_cases() -> None:
    with pytest.raises(ConfigError) as exc:
        launchcheck.check_decision("latest", "nvcr.io/nvidia/vllm:1", WRAPPER, "passthrough", None)
    err = exc.value
    assert err.exit_code == 3
    assert "images/latest.yaml: image.entrypoint is not set" in err.message and str(WRAPPER) in err.message
    assert err.hint is not None
    assert '["vllm","serve"]' in err.hint and "image.entrypoint: clear" in err.hint
    assert 'exec "$@"' in err.hint and "image.entrypoint: keep" in err.hint


@pytest.mark.parametrize(
    ("kind", "decision"),
    [("none", None), ("consuming", None), ("consuming", "clear"), ("passthrough", "keep"), ("passthrough", "clear")],
)
def test_decided_or_consuming_entrypoints_pass(kind: str, decision: str | None) -> None:
    launchcheck.check_decision("latest", "base:1", ["x"], kind, decision)


def test_keep_of_a_consuming_entrypoint_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"is keep, but the base base:1's ENTRYPOINT \['vllm', 'serve'\] consumes"):
        launchcheck.check_decision("latest", "base:1", ["vllm", "serve"], "consuming", "keep")
