from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.config.models import load_pins, load_variant
from imgbuild.errors import ConfigError
from imgbuild.patches.series import parse_series

PIN = """tag: v1
commit: {commit}
source:
  kind: git
  url: file:///x
"""


def test_pin_loads(tmp_path: Path) -> None:
    p = tmp_path / "upstream.yaml"
    p.write_text(PIN.format(commit="a" * 40))
    pin = load_pins(p)[0]
    assert pin.version == "1" and pin.source.kind == "git"


def test_pin_short_commit_names_line_and_column(tmp_path: Path) -> None:
    p = tmp_path / "upstream.yaml"
    p.write_text(PIN.format(commit="abc123"))
    with pytest.raises(ConfigError) as err:
        load_pins(p)
    assert f"{p}:2:9: commit:" in err.value.message and "pattern" in err.value.message


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    p = tmp_path / "latest.yaml"
    p.write_text("name: latest\nrevert: [engram\n")
    with pytest.raises(
        ConfigError, match=rf"{p}:2:9: invalid YAML: unclosed flow collection: the \[ that opens here has no \]"
    ):
        load_variant(p)


def test_unknown_key_did_you_mean(tmp_path: Path) -> None:
    p = tmp_path / "latest.yaml"
    p.write_text("name: latest\nreverts: [engram]\n")
    with pytest.raises(
        ConfigError, match=r"latest.yaml:2:10: reverts: unknown key 'reverts' \(did you mean 'revert'\?\)"
    ):
        load_variant(p)


def test_unknown_nested_key_did_you_mean(tmp_path: Path) -> None:
    p = tmp_path / "latest.yaml"
    p.write_text("name: latest\nimage:\n  platfroms: [linux/arm64]\n")
    with pytest.raises(ConfigError, match=r"did you mean 'platforms'"):
        load_variant(p)


def test_bad_platform(tmp_path: Path) -> None:
    p = tmp_path / "latest.yaml"
    p.write_text("name: latest\nimage:\n  platforms: [linux/s390x]\n")
    with pytest.raises(ConfigError, match=r"latest.yaml:3:14: image.platforms: .*unsupported platform"):
        load_variant(p)


def test_name_must_match_file(tmp_path: Path) -> None:
    p = tmp_path / "latest.yaml"
    p.write_text("name: other\n")
    with pytest.raises(ConfigError, match="does not match the file name"):
        load_variant(p)


def test_series_parsing(tmp_path: Path) -> None:
    p = tmp_path / "series"
    p.write_text("# comment\n\n0001-a.patch\n0002-b.patch -p1  # trailing comment\n")
    assert [e.filename for e in parse_series(p)] == ["0001-a.patch", "0002-b.patch"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [("a.patch\na.patch\n", "listed twice"), ("a.patch -p0\n", "unsupported options"), ("../x.patch\n", "file name")],
)
def test_series_errors(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "series"
    p.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        parse_series(p)
