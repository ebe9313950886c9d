from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.config.models import VariantConfig
from imgbuild.errors import ConfigError
from imgbuild.patches.patchfile import Patch
from imgbuild.patches.variants import resolve_variants


def patch(name: str, group: str) -> Patch:
    return Patch(name, f"{name}.patch", "", {"Group": group}, (), "0" * 64)


PATCHES = [
    patch("0001-attn", "sm12x"),
    patch("0002-swa", "sm12x"),
    patch("0003-engram", "engram"),
    patch("0004-loader", "engram"),
]


def variants(**kw: dict[str, object]) -> dict[str, VariantConfig]:
    return {name: VariantConfig.model_validate({"name": name, **body}) for name, body in kw.items()}


def test_latest_is_everything_and_engram_mem_reverts_the_group() -> None:
    cfg = variants(
        latest={"image": {"repository": "vllm-dsv41", "env": {"DSV41_ENGRAM_DISK": "1"}, "base": "b:1"}},
        **{"engram-mem": {"from": "latest", "revert": ["engram"], "image": {"env": {"DSV41_ENGRAM_DISK": None}}}},
    )
    out = resolve_variants(cfg, PATCHES)
    assert out["latest"].selected == ("0001-attn", "0002-swa", "0003-engram", "0004-loader")
    mem = out["engram-mem"]
    assert mem.selected == ("0001-attn", "0002-swa")
    assert mem.reverted == ("0003-engram", "0004-loader")
    assert mem.chain == ("latest", "engram-mem")
    assert mem.image.repository == "vllm-dsv41" and mem.image.base == "b:1"
    assert mem.image.tags == ("engram-mem",)
    assert dict(mem.image.env) == {} and dict(out["latest"].image.env) == {"DSV41_ENGRAM_DISK": "1"}
    assert tuple(map(str, mem.image.platforms)) == ("linux/arm64",)


def test_revert_single_patch_and_select_groups() -> None:
    cfg = variants(
        base={"patches": ["sm12x"]}, more={"from": "base", "patches": ["0004-loader"], "revert": ["0002-swa"]}
    )
    out = resolve_variants(cfg, PATCHES)
    assert out["base"].selected == ("0001-attn", "0002-swa")
    assert out["more"].selected == ("0001-attn", "0004-loader")


def test_unknown_group_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r"unknown patch or group 'engarm' \(did you mean 'engram'\?\)"):
        resolve_variants(variants(latest={"revert": ["engarm"]}), PATCHES)


def test_unknown_from() -> None:
    with pytest.raises(ConfigError, match=r"from: unknown variant 'lates' \(did you mean 'latest'\?\)"):
        resolve_variants(variants(latest={}, mem={"from": "lates"}), PATCHES)


def test_cycle_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"cycle: (a -> b -> a|b -> a -> b)"):
        resolve_variants(variants(a={"from": "b"}, b={"from": "a"}), PATCHES)


def test_shipped_variants_parse() -> None:
    from imgbuild.config.models import load_variant

    root = Path(__file__).resolve().parents[2] / "images"
    cfg = {p.stem: load_variant(p) for p in root.glob("*.yaml")}
    assert set(cfg) >= {"latest", "engram-mem"}
    assert cfg["engram-mem"].from_ == "latest" and cfg["engram-mem"].revert == ["engram"]
