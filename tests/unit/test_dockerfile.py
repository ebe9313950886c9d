"""Dockerfile rendering and build contexts (pure)."""

from __future__ import annotations

import io
import tarfile

import pytest

from imgbuild.plan.dockerfile import context_tar, layer_context, listing, quote, render_image

SITE = "/usr/local/lib/python3.12/dist-packages"


def test_image_dockerfile_is_one_copy_per_layer_then_metadata_and_no_run() -> None:
    text = render_image("base:1", SITE + "/", ["aaaa", "bbbb"], [("DSV41_ENGRAM_DISK", "1")], {"b": "2", "a": "1"})
    lines = text.splitlines()
    assert lines[1] == "FROM base:1"
    assert lines[2:4] == [f"COPY layers/aaaa/ {SITE}/", f"COPY layers/bbbb/ {SITE}/"]  # bottom first, one layer each
    assert lines[-2:] == ["ENTRYPOINT []", "CMD []"]
    assert 'ENV DSV41_ENGRAM_DISK="1"' in lines
    assert not any(ln.startswith(("RUN", "ADD")) for ln in lines)
    assert text.index('a="1"') < text.index('b="2"')  # sorted labels


def test_an_image_without_layers_is_its_base_and_metadata() -> None:
    lines = render_image("base:1", SITE, [], [], {"a": "1"}).splitlines()
    assert lines[1] == "FROM base:1" and not any(ln.startswith("COPY") for ln in lines)


def test_the_bake_form_names_the_base_through_an_arg() -> None:
    lines = render_image("base@sha256:ab", SITE, ["aaaa"], [], {}, base_arg=True).splitlines()
    assert lines[1:4] == ["ARG BASE=base@sha256:ab", "FROM ${BASE}", f"COPY layers/aaaa/ {SITE}/"]
    assert not any(ln.startswith("LABEL") for ln in lines)  # bake sets them on the target


def test_a_layer_of_several_upstreams_is_one_directory_so_one_copy() -> None:
    files = layer_context({"aaaa": {"vllm/a.py": b"1", "flashinfer/p.py": b"2"}})
    assert files == {"layers/aaaa/vllm/a.py": b"1", "layers/aaaa/flashinfer/p.py": b"2"}


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
