"""Property: applying a series and then dropping a group gives exactly the
pristine blobs for that group's files (and the patched ones for the rest)."""

from __future__ import annotations

import difflib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from imgbuild.config.models import VariantConfig
from imgbuild.patches.patchfile import parse_patch
from imgbuild.patches.variants import plan_variant, resolve_variants
from imgbuild.upstream.git import blob_id
from tests.support.synth import header


class MemTree:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.blobs = {blob_id(v): v for v in files.values()}

    def read(self, path: str) -> bytes | None:
        return self.files.get(path)

    def blob(self, sha: str) -> bytes | None:
        return self.blobs.get(sha)

    def symlink_prefix(self, _path: str) -> str | None:
        return None


def git_diff(path: str, old: str, new: str) -> str:
    body = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}", n=3))
    return f"diff --git a/{path} b/{path}\nindex {blob_id(old.encode())}..{blob_id(new.encode())} 100644\n" + body


lines = st.lists(
    st.sampled_from(["x = 1\n", "y = 2\n", "pass\n", "# c\n", "def f():\n", "    return 0\n"]), min_size=8, max_size=30
)


@st.composite
def stacks(draw: st.DrawFn) -> tuple[dict[str, str], list[tuple[str, str, str, str]]]:
    n_files = draw(st.integers(2, 5))
    files = {f"vllm/m{i}.py": "".join(draw(lines)) for i in range(n_files)}
    patches = []
    for i, path in enumerate(sorted(files)):
        old = files[path]
        src = old.splitlines(True)
        at = draw(st.integers(0, len(src) - 1))
        src[at] = f"changed_{i} = {draw(st.integers(0, 99))}\n"
        group = "engram" if i == 0 else draw(st.sampled_from(["engram", "sm12x"]))
        patches.append((f"{i + 1:04d}-p{i}.patch", group, path, git_diff(path, old, "".join(src))))
    return files, patches


@settings(max_examples=60, deadline=None)
@given(stacks())
def test_dropping_a_group_restores_pristine_blobs(tmp_path_factory, data) -> None:  # type: ignore[no-untyped-def]
    files, specs = data
    tmp = tmp_path_factory.mktemp("prop")
    patches = []
    for filename, group, _path, diff in specs:
        p = Path(tmp) / filename
        p.write_text(header(filename, group) + diff)
        patches.append(parse_patch(p))
    tree = MemTree({k: v.encode() for k, v in files.items()})
    cfg = {
        "latest": VariantConfig.model_validate({"name": "latest"}),
        "mem": VariantConfig.model_validate({"name": "mem", "from": "latest", "revert": ["engram"]}),
    }
    resolved = resolve_variants(cfg, patches)
    full = plan_variant(resolved["latest"], patches, tree)
    mem = plan_variant(resolved["mem"], patches, tree)
    groups = {path: group for _f, group, path, _d in specs}
    for f in mem.files:
        if groups[f.path] == "engram":
            assert f.state == "original" and f.blob == f.pristine_blob == blob_id(files[f.path].encode())
        else:
            assert f.state == "patched"
            assert f.blob == next(x.blob for x in full.files if x.path == f.path)
    assert all(f.state == "patched" for f in full.files)
