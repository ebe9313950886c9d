"""Property: a variant derived from the full series' run (`derive_stack`) is exactly what
applying the variant's own selection gives (`apply_stack`): every outcome, hunk and byte.

The stacks are made to interfere: several patches change the same file one after another,
so leaving one out shifts, conflicts or 3-way merges (real `git merge-file`) the later ones, and
some are made against the pristine file, so that the full run itself needs 3-way merges.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from imgbuild.patches.apply import apply_stack, derive_stack
from imgbuild.patches.patchfile import Patch, parse_patch
from imgbuild.project import merge3
from tests.support.synth import header
from tests.unit.test_property import MemTree, git_diff

WORDS = ["x = 1\n", "y = 2\n", "pass\n", "# c\n", "def f():\n", "    return 0\n", "z = 3\n"]


@st.composite
def stacks(draw: st.DrawFn) -> tuple[dict[str, str], list[tuple[str, str]], list[bool]]:
    files = {
        f"vllm/m{i}.py": "".join(draw(st.lists(st.sampled_from(WORDS), min_size=6, max_size=24)))
        for i in range(draw(st.integers(1, 3)))
    }
    current = dict(files)
    specs = []
    for i in range(draw(st.integers(2, 8))):
        path = draw(st.sampled_from(sorted(files)))
        stale = draw(st.integers(0, 3)) == 0  # made against the pristine file: may need 3-way in the full run
        old = files[path] if stale else current[path]
        lines = old.splitlines(True)
        at = draw(st.integers(0, len(lines) - 1))
        if draw(st.booleans()):
            lines[at] = f"changed_{i} = {draw(st.integers(0, 9))}\n"
        else:
            lines.insert(at, f"added_{i} = 1\n")
        new = "".join(lines)
        if not stale:
            current[path] = new
        specs.append((f"{i + 1:04d}-p{i}.patch", git_diff(path, old, new)))
    keep = draw(st.lists(st.booleans(), min_size=len(specs), max_size=len(specs)))
    return files, specs, keep


def load(tmp: Path, specs: list[tuple[str, str]]) -> list[Patch]:
    patches = []
    for filename, diff in specs:
        (tmp / filename).write_text(header(filename, "g") + diff)
        patches.append(parse_patch(tmp / filename))
    return patches


@settings(max_examples=150, deadline=None)
@given(stacks(), st.sampled_from([0, 2]), st.booleans())
def test_derived_variant_equals_applying_its_selection(tmp_path_factory, data, fuzz, variant_merges) -> None:  # type: ignore[no-untyped-def]
    files, specs, keep = data
    patches = load(tmp_path_factory.mktemp("derive"), specs)
    tree = MemTree({k: v.encode() for k, v in files.items()})
    kept = [p.name for p, k in zip(patches, keep, strict=True) if k]
    # `patches check` runs the full series with 3-way merges and plans variants without them
    full = apply_stack(patches, tree, max_fuzz=fuzz, merge3=merge3)
    variant_merge3 = merge3 if variant_merges else None
    derived = derive_stack(full, patches, kept, tree, max_fuzz=fuzz, merge3=variant_merge3)
    direct = apply_stack([p for p in patches if p.name in kept], tree, max_fuzz=fuzz, merge3=variant_merge3)
    assert derived.outcomes == direct.outcomes
    assert derived.changed == direct.changed
    assert [o.patch for o in derived.outcomes] == kept


def test_reuse_is_real_and_a_left_out_patch_forces_reapplying(tmp_path: Path) -> None:
    # Two files: the left-out patch touches only a.py, so b.py's patch is reused as is
    # and a.py's second patch is applied again on the pristine a.py (where it conflicts).
    a0 = "".join(f"a{i} = {i}\n" for i in range(12))
    a1 = a0.replace("a5 = 5\n", "a5 = 50\n")
    a2 = a1.replace("a5 = 50\n", "a5 = 500\n")
    b0 = "".join(f"b{i} = {i}\n" for i in range(12))
    b1 = b0.replace("b3 = 3\n", "b3 = 30\n")
    specs = [
        ("0001-a1.patch", git_diff("vllm/a.py", a0, a1)),
        ("0002-b1.patch", git_diff("vllm/b.py", b0, b1)),
        ("0003-a2.patch", git_diff("vllm/a.py", a1, a2)),
    ]
    patches = load(tmp_path, specs)
    tree = MemTree({"vllm/a.py": a0.encode(), "vllm/b.py": b0.encode()})
    full = apply_stack(patches, tree)
    derived = derive_stack(full, patches, ["0002-b1", "0003-a2"], tree)
    assert derived.outcomes[0] is full.outcomes[1]  # reused, not recomputed
    assert derived.outcomes[1] is not full.outcomes[2]
    assert full.outcomes[2].method == "exact" and derived.outcomes[1].method == "conflict"
    assert derived.changed == {"vllm/b.py": b1.encode()}
