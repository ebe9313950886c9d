"""A build's receipt (builder/receipt.py): its key moves with everything that decides the plan, on a real git
project: a patch's bytes, a variant file, the lock, a new commit (the images' revision label), the selection and the
options; `--force` and `--builder` have no key, so no receipt ever answers them; a record is read back only as it
was written (the docker tier runs the receipt against the engine: tests/docker/test_build.py)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from imgbuild.builder.options import BuildOptions
from imgbuild.builder.receipt import Kept, key
from tests.support.synth import git


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / "patches").mkdir(parents=True)
    (root / "images").mkdir()
    (root / "patches" / "series").write_text("0001-a.patch\n")
    (root / "patches" / "0001-a.patch").write_text("a patch\n")
    (root / "images" / "latest.yaml").write_text("name: latest\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the project")
    return root


def digest(root: Path, variants: list[str] | None = None, platform: str | None = None, **kw: object) -> str:
    found = key(root, variants, platform, BuildOptions(**kw), root.parent / "cache")  # type: ignore[arg-type]
    assert found is not None
    return found.digest


def test_the_key_is_stable_and_moves_with_each_input(root: Path) -> None:
    first = digest(root)
    assert digest(root) == first
    seen = {first}

    def moved(new: str) -> None:
        assert new not in seen
        seen.add(new)

    (root / "patches" / "0001-a.patch").write_text("a patch, edited\n")
    moved(digest(root))
    (root / "images" / "latest.yaml").write_text("name: latest\nimage:\n  tags: [latest, x]\n")
    moved(digest(root))
    (root / "images.lock").write_text("bases: {}\n")
    moved(digest(root))
    git(root, "commit", "-q", "-am", "another revision")
    moved(digest(root))
    git(root, "remote", "add", "origin", "https://example.com/p.git")
    moved(digest(root))
    now = digest(root)
    for other in (
        digest(root, ["latest"]),
        digest(root, platform="linux/amd64"),
        digest(root, base="skeleton"),
        digest(root, repository="reg/x"),
        digest(root, smoke=False),
    ):
        moved(other)
    assert digest(root) == now


def test_force_and_a_builder_are_never_answered_from_a_receipt(root: Path) -> None:
    cache = root.parent / "cache"
    assert key(root, None, None, BuildOptions(force=True), cache) is None
    assert key(root, None, None, BuildOptions(builder="spark-farm"), cache) is None


def test_a_record_is_read_back_only_as_it_was_written() -> None:
    kept = Kept("latest", "linux/arm64", "sha256:" + "a" * 64, "r:1.0.0-aaaa", ("r:latest",), "a" * 64, "", "",
                "base:1", "sha256:" + "b" * 64)  # fmt: skip
    assert Kept.read(asdict(kept)) == kept
    written = asdict(kept)
    for broken in (
        {k: v for k, v in written.items() if k != "base_id"},  # a key missing
        {**written, "extra": 1},  # a key it never wrote
        {**written, "image_id": None},
        {**written, "moving": [1]},
        ["latest"],
    ):
        with pytest.raises((TypeError, ValueError)):
            Kept.read(broken)
