"""A failed build puts back the tags it wrote; one it cannot put back is said, with the command that does it."""

from __future__ import annotations

from typing import Any

from imgbuild.builder.options import BuildOptions
from imgbuild.builder.runner import Runner
from imgbuild.errors import DockerError
from imgbuild.plan.builds import BuildPlan


class Engine:
    """The engine calls _restore makes; `tag` and `untag` fail as a vanished daemon would."""

    def image(self, _ref: str) -> Any:
        return None  # no image: `ref` names nothing now, so every noted tag needs putting back

    def tag(self, image_id: str, ref: str) -> None:
        raise DockerError(f"tag {ref} ({image_id[:12]}): connection refused")

    def untag(self, ref: str) -> None:
        raise DockerError(f"untag {ref}: connection refused")


def test_a_tag_that_cannot_be_put_back_is_said_with_the_command_that_does_it() -> None:
    said: list[str] = []
    plan = BuildPlan(images=(), layer_plans=())
    runner = Runner(Engine(), plan, BuildOptions(), said.append, epoch=0)  # type: ignore[arg-type]
    runner._previous = {"r/v:latest": "sha256:" + "a" * 64, "r/v:1.0-abc": None}
    runner._restore()
    assert said == [
        f"could not put r/v:latest back to sha256:{'a' * 64}: tag r/v:latest (sha256:aaaaa): connection refused; "
        f"to do it: docker tag sha256:{'a' * 64} r/v:latest",
        "could not put r/v:1.0-abc back to nothing: untag r/v:1.0-abc: connection refused; "
        "to do it: docker image rm --no-prune r/v:1.0-abc",
    ]


class Tags:
    """An engine whose tags are a dict: ref -> image id."""

    def __init__(self, tags: dict[str, str]) -> None:
        self.tags = tags

    def image(self, ref: str) -> Any:
        found = self.tags.get(ref)
        return None if found is None else type("Info", (), {"id": found})()

    def tag(self, image_id: str, ref: str) -> None:
        self.tags[ref] = image_id


def test_a_moving_tag_moved_off_another_image_is_said() -> None:
    """A plain build after `rollback` moves the tag forward again: it says so, from what to what (issue 44)."""
    old, new = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    said: list[str] = []
    engine = Tags({"r/v:latest": old})
    runner = Runner(engine, BuildPlan(images=(), layer_plans=()), BuildOptions(), said.append, epoch=0)  # type: ignore[arg-type]
    assert runner._move(new, ["r/v:latest", "r/v:fresh"])
    assert engine.tags == {"r/v:latest": new, "r/v:fresh": new}
    assert said == ["r/v:latest: moved from aaaaaaaaaaaa to bbbbbbbbbbbb (`imgbuild rollback --to` moves it back)"]
    assert not runner._move(new, ["r/v:latest"]) and len(said) == 1  # already there: nothing moved, nothing said
