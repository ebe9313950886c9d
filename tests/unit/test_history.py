"""history's pure part: which local images are a variant's builds, a join's platforms, the order, `--to`."""

from __future__ import annotations

import json

import pytest

from imgbuild.deploy.history import History, check_target, entries, target_ref
from imgbuild.engine import ImageInfo
from imgbuild.errors import UsageError
from imgbuild.smoke.record import SmokeRecord

REPO = "vllm-dsv41"


def image(
    image_id: str, tags: list[str], inputs: str, arch: str = "arm64", series: str = "s1", **labels: str
) -> ImageInfo:
    return ImageInfo(
        id=image_id, tags=tuple(tags), repo_digests=(), os="linux", arch=arch, variant="", entrypoint=None, cmd=None,
        env=(), layers=(), size=0, last_tagged=labels.pop("last_tagged", ""),
        labels={
            "imgbuild.variant": labels.pop("variant", "latest"), "imgbuild.inputs": inputs,
            "org.opencontainers.image.version": "0.33.0",
            "org.opencontainers.image.created": labels.pop("created", "2026-12-01T00:00:00Z"),
            "imgbuild.series": series, "imgbuild.upstream.commit": "c" * 40, "imgbuild.upstream.tag": "v0.33.0",
            "imgbuild.patches": json.dumps({"0001": "applied"}), "imgbuild.files": "{}", **labels,
        },
    )  # fmt: skip


def test_builds_joins_order_and_what_is_not_a_build() -> None:
    a = "a" * 64
    b = "b" * 64
    infos = [
        image("sha256:1", [f"{REPO}:0.33.0-{a[:12]}"], f"sha256:{a}", created="2026-11-01T00:00:00Z"),
        image("sha256:2", [f"{REPO}:0.33.0-{b[:12]}"], f"sha256:{b}", series="s2"),  # arm64 part of the join
        image("sha256:3", [f"{REPO}:0.33.0-{'c' * 12}"], f"sha256:{'c' * 64}", arch="amd64", series="s2"),
        # the join: the engine shows it with a part's config (amd64 here), its tag is not that part's inputs
        image(
            "sha256:9", [f"{REPO}:0.33.0-{'9' * 12}", f"{REPO}:latest"], f"sha256:{'c' * 64}", arch="amd64", series="s2"
        ),
        image("sha256:4", [f"other:0.33.0-{'d' * 12}"], f"sha256:{'d' * 64}"),  # another repository
        image("sha256:5", [f"{REPO}:0.33.0-{'e' * 12}"], f"sha256:{'e' * 64}", variant="engram-mem"),
        image("sha256:6", [f"{REPO}:handmade"], f"sha256:{'f' * 64}"),  # no immutable tag
    ]
    smoke = {"sha256:2": SmokeRecord(True, "x", ()), "sha256:3": SmokeRecord(True, "y", ()), "sha256:1": None}
    found = entries(infos, REPO, "latest", {f"{REPO}:latest": "sha256:9"}, smoke.get)
    assert [e.image_id for e in found if e.kind == "join"] == ["sha256:9"]
    assert sorted(e.image_id for e in found) == ["sha256:1", "sha256:2", "sha256:3", "sha256:9"]
    assert found[-1].image_id == "sha256:1"  # the oldest inputs' date last
    join = next(e for e in found if e.kind == "join")
    assert join.platforms == {"linux/amd64": "sha256:3", "linux/arm64": "sha256:2"}
    assert join.moving == (f"{REPO}:latest",) and join.smoke_state == "passed"
    assert next(e for e in found if e.image_id == "sha256:1").smoke_state == "unknown"

    history = History(variant="latest", repository=REPO, moving={f"{REPO}:latest": "sha256:9"}, entries=tuple(found))
    assert check_target(infos[0], infos[0].tags[0], history).image_id == "sha256:1"
    with pytest.raises(UsageError, match="variant engram-mem, not latest"):
        check_target(infos[5], infos[5].tags[0], history)
    bare = ImageInfo("sha256:7", ("x:1",), (), "linux", "arm64", "", None, None, (), {}, (), 0)
    with pytest.raises(UsageError, match="no imgbuild labels"):
        check_target(bare, "x:1", history)
    with pytest.raises(UsageError, match="has no immutable tag"):
        check_target(infos[6], infos[6].tags[0], history)


def test_what_to_names() -> None:
    assert target_ref(REPO, "0.33.0-abc") == f"{REPO}:0.33.0-abc"
    assert target_ref(REPO, "other:1") == "other:1"
    assert target_ref(REPO, f"{REPO}@sha256:{'a' * 64}") == f"sha256:{'a' * 64}"
    assert target_ref(REPO, f"sha256:{'a' * 64}") == f"sha256:{'a' * 64}"
