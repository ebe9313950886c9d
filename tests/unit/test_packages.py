"""The base's packages against the pins (plan/packages.py) and the base probe's lines (builder/base_probe.py): pure."""

from __future__ import annotations

import pytest

from imgbuild.builder.base_probe import Python, parse
from imgbuild.config.models import UpstreamPin
from imgbuild.errors import DockerError
from imgbuild.plan.packages import message, mismatches

WHEEL = {"kind": "wheel", "filename": "x.whl", "sha256": "0" * 64}
VLLM = UpstreamPin.model_validate(
    {"name": "vllm", "tag": "v0.34.0", "commit": "1" * 40, "source": {**WHEEL, "project": "vllm", "version": "0.34.0"}}
)
FLASHINFER = UpstreamPin.model_validate(
    {
        "name": "flashinfer",
        "package_root": "flashinfer",
        "tag": "v0.7.4",
        "commit": "2" * 40,
        "source": {**WHEEL, "project": "flashinfer-python", "version": "0.7.4"},
        "override": {"requirement": "flashinfer-python==0.7.3", "version": "0.7.4", "reason": "the index lacks 0.7.3"},
        "companions": ["flashinfer-cubin", "flashinfer_jit_cache"],
    }
)


def test_the_base_probes_lines_parse_to_canonical_names_versions_and_bytecode() -> None:
    dists = [
        "flashinfer_python-0.7.3.dist-info",
        "vllm-0.34.0+cu130.dist-info",
        "torch-2.14.0.dist-info",
        "x.dist-info",
    ]
    site = "/usr/local/lib/python3.12/dist-packages"
    pyc = f"imgbuild-base pyc vllm/a.py {site}/vllm/__pycache__/a.cpython-312.pyc aGk="
    out = "\n".join(
        ["noise", "imgbuild-base python cpython-312 3.12.3 cb0d0d0a", *(f"imgbuild-base dist {d}" for d in dists), pyc]
    )
    facts = parse(out, site, "base:1")
    assert facts.packages == {"flashinfer-python": "0.7.3", "vllm": "0.34.0+cu130", "torch": "2.14.0"}
    assert facts.bytecode.python == "cpython-312"
    assert facts.python == Python("cpython-312", "3.12.3", "cb0d0d0a")  # what bytecode compiled here must equal
    assert facts.bytecode.for_files(["vllm/a.py", "vllm/b.txt"]) == {"vllm/__pycache__/a.cpython-312.pyc": b"hi"}


def test_a_pycache_prefix_outside_site_packages_is_refused_naming_it() -> None:
    line = "imgbuild-base pyc vllm/a.py /pyc/usr/local/vllm/a.cpython-312.pyc aGk="
    with pytest.raises(DockerError, match="PYTHONPYCACHEPREFIX") as info:
        parse(line, "/usr/local/lib/python3.12/dist-packages", "base:1")
    assert "unset PYTHONPYCACHEPREFIX" in (info.value.hint or "")


def test_the_stock_images_flashinfer_is_named_with_both_versions_and_the_override() -> None:
    base = {"vllm": "0.34.0+cu130", "flashinfer-python": "0.7.3", "flashinfer-cubin": "0.7.3", "torch": "2.14.0"}
    found = mismatches([VLLM, FLASHINFER], base)
    assert [(m.package, m.base_version, m.pinned, m.companion_of) for m in found] == [
        ("flashinfer-python", "0.7.3", "0.7.4", None),
        ("flashinfer-cubin", "0.7.3", "0.7.4", "flashinfer-python"),
    ]  # a local label (+cu130) is the same release; a companion the base lacks (jit-cache) is not judged
    text, hint = message("vllm/vllm-openai:v0.34.0", found)
    assert "flashinfer-python: the base has 0.7.3, the stack pins 0.7.4" in text
    assert "overrides flashinfer-python==0.7.3 with 0.7.4 because the index lacks 0.7.3" in text
    assert "flashinfer-cubin (released with flashinfer-python): the base has 0.7.3" in text
    assert "--base runtime" in hint and "re-pin" in hint


def test_a_base_at_the_pins_or_without_metadata_passes() -> None:
    at_pins = {"vllm": "0.34.0", "flashinfer-python": "0.7.4", "flashinfer-jit-cache": "0.7.4"}
    assert mismatches([VLLM, FLASHINFER], at_pins) == []
    assert mismatches([VLLM, FLASHINFER], {}) == []  # a stand-in without dist-info: the drift check compares files
    assert [m.package for m in mismatches([VLLM], {"vllm": "0.33.0"})] == ["vllm"]
