"""history and rollback, the pure parts: entries from labels, their order, the rollback target, rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgbuild.builder import history as hist
from imgbuild.engine import ImageInfo
from imgbuild.errors import UsageError
from imgbuild.report.history import history_lines, rollback_lines

REPO = "vllm-x"


def info(image_id: str, tags: list[str], inputs: str, *, variant: str = "latest", tagged: str = "") -> ImageInfo:
    labels = {
        "imgbuild.variant": variant,
        "imgbuild.inputs": inputs,
        "org.opencontainers.image.version": "1.0.0",
        "org.opencontainers.image.created": "2026-01-01T00:00:00Z",
        "org.opencontainers.image.base.name": "docker.io/library/base:1",
        "imgbuild.upstream.tag": "v1.0.0",
        "imgbuild.upstream.commit": "c" * 40,
        "imgbuild.series": "s" * 64,
        "imgbuild.patches": json.dumps({"0001-a": "applied", "0002-b": "reverted"}),
        "imgbuild.files": json.dumps(
            {"vllm/a.py": ["patched", "1" * 64, "2" * 64], "vllm/b.py": ["original", "3" * 64]}
        ),
    }
    return ImageInfo(
        id=image_id, tags=tuple(tags), repo_digests=(), os="linux", arch="arm64", variant="", entrypoint=None,
        cmd=None, env=(), labels=labels, layers=(), size=0, last_tagged=tagged,
    )  # fmt: skip


def three() -> list[ImageInfo]:
    return [
        info("sha256:aaa", [f"{REPO}:1.0.0-{'a' * 12}"], "a" * 64),
        info("sha256:bbb", [f"{REPO}:1.0.0-{'b' * 12}", f"{REPO}:latest"], "b" * 64),
        info("sha256:ccc", [f"{REPO}:1.0.0-{'c' * 12}", f"{REPO}:layer-{'d' * 12}"], "c" * 64),
        info("sha256:ddd", [f"other:1.0.0-{'d' * 12}"], "d" * 64),  # another repository
        info("sha256:eee", [f"{REPO}:1.0.0-{'e' * 12}"], "e" * 64, variant="engram-mem"),
    ]


BUILT = {
    f"{REPO}:1.0.0-{'a' * 12} sha256:aaa": "2026-01-01T10:00:00.000000Z",
    f"{REPO}:1.0.0-{'b' * 12} sha256:bbb": "2026-01-01T11:00:00.000000Z",
    f"{REPO}:1.0.0-{'c' * 12} sha256:ccc": "2026-01-01T12:00:00.000000Z",
}


def history(named: dict[str, str | None]) -> hist.History:
    found = hist.entries(three(), REPO, "latest", named, BUILT)
    return hist.History("latest", REPO, tuple(named), tuple(found), named)


def test_entries_are_the_variants_immutable_tags_in_its_repository_newest_first() -> None:
    h = history({f"{REPO}:latest": "sha256:bbb"})
    assert [e.ref for e in h.entries] == [f"{REPO}:1.0.0-{'c' * 12}", f"{REPO}:1.0.0-{'b' * 12}",
                                          f"{REPO}:1.0.0-{'a' * 12}"]  # fmt: skip
    b = h.entries[1]
    assert b.moving == (f"{REPO}:latest",) and b.kind == "image" and b.platforms == ("linux/arm64",)
    assert b.patches == {"0001-a": "applied", "0002-b": "reverted"}
    assert b.files == {"vllm/a.py": "patched", "vllm/b.py": "original"}
    assert b.built_at_source == "record" and b.base_name == "docker.io/library/base:1"
    assert h.current() == b


def test_without_a_record_the_engines_last_tag_time_orders() -> None:
    infos = [
        info("sha256:aaa", [f"{REPO}:1.0.0-{'a' * 12}"], "a" * 64, tagged="2026-01-02T00:00:00.5Z"),
        info("sha256:bbb", [f"{REPO}:1.0.0-{'b' * 12}"], "b" * 64, tagged="2026-01-01T00:00:00.123456789Z"),
    ]
    found = hist.entries(infos, REPO, "latest", {}, {})
    assert [e.image_id for e in found] == ["sha256:aaa", "sha256:bbb"]
    assert found[0].built_at_source == "last-tag-time"


def test_a_tag_whose_digest_is_not_the_inputs_label_is_a_join() -> None:
    infos = [
        info("sha256:aaa", [f"{REPO}:1.0.0-{'a' * 12}"], "a" * 64),
        info("sha256:fff", [f"{REPO}:1.0.0-{'f' * 12}"], "a" * 64),  # inherits a part's labels
    ]
    found = {e.image_id: e for e in hist.entries(infos, REPO, "latest", {}, {})}
    assert found["sha256:fff"].kind == "join" and found["sha256:aaa"].kind == "image"
    assert found["sha256:fff"].platforms == ("linux/arm64",)


def test_rollback_default_is_the_newest_older_than_what_the_moving_tag_names() -> None:
    assert hist.select_target(history({f"{REPO}:latest": "sha256:ccc"}), None).image_id == "sha256:bbb"
    assert hist.select_target(history({f"{REPO}:latest": "sha256:bbb"}), None).image_id == "sha256:aaa"


def test_rollback_refuses_when_nothing_is_older_or_nothing_is_named() -> None:
    with pytest.raises(UsageError, match="oldest"):
        hist.select_target(history({f"{REPO}:latest": "sha256:aaa"}), None)
    with pytest.raises(UsageError, match=r"no .older."):
        hist.select_target(history({f"{REPO}:latest": None}), None)


def test_rollback_to_takes_a_tag_or_a_full_ref_and_refuses_others() -> None:
    h = history({f"{REPO}:latest": "sha256:ccc"})
    assert hist.select_target(h, f"1.0.0-{'a' * 12}").image_id == "sha256:aaa"
    assert hist.select_target(h, f"{REPO}:1.0.0-{'a' * 12}").image_id == "sha256:aaa"
    with pytest.raises(UsageError, match="not an immutable tag of variant latest") as exc:
        hist.select_target(h, f"other:1.0.0-{'d' * 12}")
    assert exc.value.exit_code == 2
    with pytest.raises(UsageError):
        hist.select_target(h, "latest")


def test_check_labels_names_the_wrong_variant_and_repository() -> None:
    other = info("sha256:eee", [f"elsewhere:1.0.0-{'e' * 12}"], "e" * 64, variant="engram-mem")
    with pytest.raises(UsageError) as exc:
        hist.check_labels(other, f"elsewhere:1.0.0-{'e' * 12}", REPO, "latest")
    assert "'engram-mem', not 'latest'" in exc.value.message and "'elsewhere', not this project's" in exc.value.message
    hist.check_labels(three()[0], f"{REPO}:1.0.0-{'a' * 12}", REPO, "latest")  # its own: accepted


def test_record_is_read_back_and_the_last_line_wins(tmp_path: Path) -> None:
    hist.record(tmp_path, "r:1", "sha256:1")
    hist.record(tmp_path, "r:2", "sha256:2")
    hist.record(tmp_path, "r:1", "sha256:1")
    (tmp_path / hist.RECORD).open("a").write("not json\n")
    got = hist.recorded(tmp_path)
    assert set(got) == {"r:1 sha256:1", "r:2 sha256:2"} and got["r:1 sha256:1"] >= got["r:2 sha256:2"]
    assert hist.recorded(tmp_path / "missing") == {}


def test_rendering_shows_inputs_and_what_moved() -> None:
    h = history({f"{REPO}:latest": "sha256:bbb"})
    text = "\n".join(history_lines(h))
    assert f"{REPO}:latest -> {REPO}:1.0.0-{'b' * 12}" in text
    assert f"{REPO}:1.0.0-{'b' * 12}  <- {REPO}:latest" in text
    assert "1 applied, 1 reverted (0002-b)" in text and "1 original, 1 patched" in text
    assert "v1.0.0 (cccccccccccc)" in text
    target = hist.select_target(h, None)
    moves = (hist.Move(f"{REPO}:latest", f"{REPO}:1.0.0-{'b' * 12}", "sha256:bbb", target.ref, target.image_id),)
    lines = rollback_lines(hist.Rollback("latest", target, moves, None))
    assert lines == [
        f"{target.ref}: not smoke-tested (--no-smoke)",
        f"{REPO}:latest: moved from {REPO}:1.0.0-{'b' * 12} to {REPO}:1.0.0-{'a' * 12}",
    ]
