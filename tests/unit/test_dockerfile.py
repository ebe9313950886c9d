"""Dockerfile rendering and build contexts (pure)."""

from __future__ import annotations

import io
import tarfile

import pytest

from imgbuild.plan.dockerfile import context_tar, layer_context_path, listing, quote, render_layer, render_variant


def test_layer_dockerfile_is_one_copy_and_no_run() -> None:
    text = render_layer("base:1", ["vllm"], "/usr/local/lib/python3.12/dist-packages/", {"imgbuild.layer": "abc"})
    lines = text.splitlines()
    assert "FROM base:1" in lines
    assert "COPY vllm/ /usr/local/lib/python3.12/dist-packages/vllm/" in lines
    assert sum(1 for ln in lines if ln.startswith(("COPY", "ADD"))) == 1
    assert not any(ln.startswith("RUN") for ln in lines)
    assert 'LABEL imgbuild.layer="abc"' in lines


def test_a_layer_of_several_upstreams_is_still_one_copy() -> None:
    text = render_layer("base:1", ["vllm", "flashinfer"], "/site/", {"imgbuild.layer": "abc"})
    copies = [ln for ln in text.splitlines() if ln.startswith(("COPY", "ADD"))]
    assert copies == ["COPY packages/ /site/"]  # one COPY: one image layer, as integrity checks expect
    assert layer_context_path("flashinfer/p.py", ["vllm", "flashinfer"]) == "packages/flashinfer/p.py"
    assert layer_context_path("vllm/a.py", ["vllm"]) == "vllm/a.py"


def test_variant_dockerfile_clears_entrypoint_and_cmd_and_adds_no_layer() -> None:
    text = render_variant("repo:layer-1", [("DSV41_ENGRAM_DISK", "1")], {"b": "2", "a": "1"})
    lines = text.splitlines()
    assert lines[1] == "FROM repo:layer-1"
    assert lines[-2:] == ["ENTRYPOINT []", "CMD []"]
    assert 'ENV DSV41_ENGRAM_DISK="1"' in lines
    assert not any(ln.startswith(("RUN", "COPY", "ADD")) for ln in lines)
    assert text.index('a="1"') < text.index('b="2"')  # sorted labels


def test_quote_escapes_json_and_variables() -> None:
    assert quote('{"a":"$HOME\\x"}') == '"{\\"a\\":\\"\\$HOME\\\\x\\"}"'


def test_context_is_deterministic_sorted_and_owned_by_root() -> None:
    files = {"vllm/b.py": b"b\n", "vllm/a/x.py": b"x\n"}
    one = context_tar("FROM x\n", files)
    two = context_tar("FROM x\n", dict(reversed(list(files.items()))))
    assert one == two
    with tarfile.open(fileobj=io.BytesIO(one)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["Dockerfile", "vllm", "vllm/a", "vllm/a/x.py", "vllm/b.py"]
    assert {(m.uid, m.gid, m.mtime, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert {m.mode for m in members if m.isfile()} == {0o644} and {m.mode for m in members if m.isdir()} == {0o755}
    assert [str(e).split()[-1] for e in listing(one)] == [m.name for m in members]


def test_context_only_holds_the_given_files() -> None:
    names = [e.name for e in listing(context_tar("FROM x\n", {"vllm/one.py": b"1"}))]
    assert names == ["Dockerfile", "vllm", "vllm/one.py"]


@pytest.mark.parametrize("bad", ["/etc/passwd", "vllm/../../x", "Dockerfile"])
def test_context_refuses_bad_paths(bad: str) -> None:
    with pytest.raises(ValueError, match="bad context path"):
        context_tar("FROM x\n", {bad: b""})
