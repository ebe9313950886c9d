"""`Platform`: parsed once where it enters (the CLI, images/, images.lock, a registry); the arm64/v8 rule once."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.config.models import load_variant
from imgbuild.errors import UsageError
from imgbuild.platforms import Platform


def test_a_known_platform_parses_and_arm64_v8_is_arm64() -> None:
    arm = Platform.parse("linux/arm64")
    assert (
        arm
        == Platform.parse("linux/arm64/v8")
        == Platform.of("linux", "arm64", "v8")
        == Platform.read("linux/arm64/v8")
    )
    assert str(arm) == "linux/arm64" and arm.machine == "aarch64" and arm.oci_variant == "v8"
    assert Platform.parse("linux/amd64").oci_variant == ""
    for text in ("linux/s390x", "linux/amd64/v8", "linux/arm64/", "windows/amd64"):
        with pytest.raises(UsageError, match="unsupported platform; known: linux/arm64, linux/amd64"):
            Platform.parse(text)


def test_a_registry_or_lock_platform_is_read_whatever_it_is() -> None:
    v7 = Platform.read("linux/arm/v7")
    assert (v7.os, v7.arch, v7.variant) == ("linux", "arm", "v7") and str(v7) == "linux/arm/v7"
    assert str(Platform.read("linux/s390x")) == "linux/s390x"


def test_images_platforms_are_platforms_written_back_as_their_text(tmp_path: Path) -> None:
    p = tmp_path / "latest.yaml"
    p.write_text("name: latest\nimage:\n  platforms: [linux/arm64/v8, linux/amd64]\n")
    spec = load_variant(p).image
    assert spec.platforms == [Platform.parse("linux/arm64"), Platform.parse("linux/amd64")]
    assert spec.model_dump(mode="json")["platforms"] == ["linux/arm64", "linux/amd64"]
