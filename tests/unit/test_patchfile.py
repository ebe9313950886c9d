from __future__ import annotations

from pathlib import Path

import pytest

from imgbuild.errors import PatchError
from imgbuild.patches.patchfile import missing_fields, parse_header, parse_patch
from tests.support.synth import header

BLOB_A = "a" * 40
BLOB_B = "b" * 40

GOOD = f"""diff --git a/vllm/x.py b/vllm/x.py
index {BLOB_A}..{BLOB_B} 100644
--- a/vllm/x.py
+++ b/vllm/x.py
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""


def write(tmp_path: Path, body: str, name: str = "0001-x.patch") -> Path:
    p = tmp_path / name
    p.write_text(header("summary", "sm12x") + body)
    return p


def test_parses_header_and_diff(tmp_path: Path) -> None:
    patch = parse_patch(write(tmp_path, GOOD))
    assert patch.name == "0001-x" and patch.group == "sm12x"
    assert patch.fields["Description"].startswith("summary\n")
    assert patch.paths == ("vllm/x.py",)
    f = patch.files[0]
    assert (f.old_blob, f.new_blob) == (BLOB_A, BLOB_B)
    h = f.hunks[0]
    assert h.old == ("one\n", "two\n", "three\n") and h.new == ("one\n", "TWO\n", "three\n")
    assert (h.lead, h.trail) == (1, 1)
    assert h.line == 13  # the @@ line: 8 header lines + 4 diff header lines + 1
    assert missing_fields(patch) == []


def test_header_continuation_and_blank_paragraph() -> None:
    fields = parse_header("Description: a\n b\n .\n c\nAuthor: x\n---\nNot: parsed\n")
    assert fields == {"Description": "a\nb\n\nc", "Author": "x"}


def test_missing_header_fields_are_reported(tmp_path: Path) -> None:
    p = tmp_path / "0001-bare.patch"
    p.write_text("Description: only this\n---\n" + GOOD)
    assert set(missing_fields(parse_patch(p))) >= {"Author", "Group", "Last-Update", "Origin or Forwarded"}


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("vllm/../etc/passwd", "vllm/../etc/passwd", "escapes the tree"),
        ("other/x.py", "other/x.py", "outside the package root"),
    ],
)
def test_refuses_paths(tmp_path: Path, old: str, new: str, needle: str) -> None:  # noqa: ARG001 - table column
    body = GOOD.replace("vllm/x.py", old)
    with pytest.raises(PatchError, match=needle) as err:
        parse_patch(write(tmp_path, body))
    assert "0001-x.patch:9" in err.value.message  # names the file and the diff --git line


def test_refuses_absolute_path(tmp_path: Path) -> None:
    body = f"""diff --git a/vllm/x.py b/vllm/x.py
index {BLOB_A}..{BLOB_B} 100644
--- /etc/passwd
+++ /etc/passwd
@@ -1 +1 @@
-a
+b
"""
    with pytest.raises(PatchError, match=r"absolute path|outside the package root"):
        parse_patch(write(tmp_path, body))


def test_refuses_symlink_creation(tmp_path: Path) -> None:
    body = f"""diff --git a/vllm/link b/vllm/link
new file mode 120000
index {"0" * 40}..{BLOB_B}
--- /dev/null
+++ b/vllm/link
@@ -0,0 +1 @@
+/etc/passwd
\\ No newline at end of file
"""
    with pytest.raises(PatchError, match=r"0001-x.patch:10: symlink is refused"):
        parse_patch(write(tmp_path, body))


def test_refuses_binary(tmp_path: Path) -> None:
    body = f"""diff --git a/vllm/x.bin b/vllm/x.bin
index {BLOB_A}..{BLOB_B} 100644
GIT binary patch
literal 1
Ic${{W0000%00RI30RR91
"""
    with pytest.raises(PatchError, match=r"0001-x.patch:11: binary diff is refused"):
        parse_patch(write(tmp_path, body))


def test_refuses_abbreviated_index(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="abbreviated index line") as err:
        parse_patch(write(tmp_path, GOOD.replace(f"{BLOB_A}..{BLOB_B}", "aaaaaaa..bbbbbbb")))
    assert err.value.hint and "--full-index" in err.value.hint


def test_no_newline_marker(tmp_path: Path) -> None:
    body = f"""diff --git a/vllm/x.py b/vllm/x.py
index {BLOB_A}..{BLOB_B} 100644
--- a/vllm/x.py
+++ b/vllm/x.py
@@ -1,2 +1,2 @@
 a
-b
\\ No newline at end of file
+c
\\ No newline at end of file
"""
    h = parse_patch(write(tmp_path, body)).files[0].hunks[0]
    assert h.old == ("a\n", "b") and h.new == ("a\n", "c")


def test_no_diff_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="no 'diff --git' section"):
        parse_patch(write(tmp_path, "just words\n"))


EMPTY = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's blob of an empty file
KNOB = "ae6579db391f608b9a3a8334c51fb436a7efa842"  # of "KNOB = 1\n"


def test_filling_an_empty_file_is_a_change_not_a_creation(tmp_path: Path) -> None:
    """`@@ -0,0 +1 @@` on `--- a/` is how git fills an empty file (an empty __init__.py); only /dev/null or the mode
    line make a new or deleted file (unidiff alone called it new, so the patch 'created a file that exists')."""
    from imgbuild.patches.apply import apply_stack

    body = (
        f"diff --git a/vllm/e.py b/vllm/e.py\nindex {EMPTY}..{KNOB} 100644\n--- a/vllm/e.py\n+++ b/vllm/e.py\n"
        "@@ -0,0 +1 @@\n+KNOB = 1\n"
        f"diff --git a/vllm/n.py b/vllm/n.py\nnew file mode 100644\nindex {'0' * 40}..{KNOB}\n--- /dev/null\n"
        "+++ b/vllm/n.py\n@@ -0,0 +1 @@\n+KNOB = 1\n"
        f"diff --git a/vllm/k.py b/vllm/k.py\nindex {KNOB}..{EMPTY} 100644\n--- a/vllm/k.py\n+++ b/vllm/k.py\n"
        "@@ -1 +0,0 @@\n-KNOB = 1\n"
    )
    path = tmp_path / "0001-x.patch"
    path.write_text(header("fill", "g") + body)
    patch = parse_patch(path)
    assert [(f.old_path, f.new_path) for f in patch.files] == [
        ("vllm/e.py", "vllm/e.py"),
        (None, "vllm/n.py"),
        ("vllm/k.py", "vllm/k.py"),  # emptied, not deleted
    ]

    files = {"vllm/e.py": b"", "vllm/k.py": b"KNOB = 1\n"}

    class Tree:
        def read(self, p: str) -> bytes | None:
            return files.get(p)

        def blob(self, _sha: str) -> bytes | None:
            return None

        def symlink_prefix(self, _p: str) -> str | None:
            return None

    result = apply_stack([patch], Tree())
    assert result.ok and result.changed == {"vllm/e.py": b"KNOB = 1\n", "vllm/n.py": b"KNOB = 1\n", "vllm/k.py": b""}
