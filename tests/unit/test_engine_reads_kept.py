"""Engine.reads_kept: within it an image is asked about once until the engine writes or makes a container; a write
drops what was kept, and outside it every lookup asks the engine (a fake SDK client counts the asks)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import docker.errors

from imgbuild.engine import Engine

ID = "sha256:" + "a" * 64


class FakeClient:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.tags = {"repo:one": ID}
        self.images = SimpleNamespace(get=self.get)
        self.api = SimpleNamespace(tag=self.tag)

    def get(self, ref: str) -> Any:
        self.asked.append(ref)
        image_id = ref if ref.startswith("sha256:") else self.tags.get(ref)
        if image_id is None:
            raise docker.errors.NotFound(f"no {ref}")
        return SimpleNamespace(attrs={"Id": image_id, "RepoTags": [t for t, i in self.tags.items() if i == image_id]})

    def tag(self, image_id: str, repo: str, tag: str, force: bool) -> bool:
        assert force  # Engine.tag moves a tag that names another image
        self.tags[f"{repo}:{tag}"] = image_id
        return True


def test_a_lookup_is_asked_once_and_its_id_is_kept_too() -> None:
    client = FakeClient()
    engine = Engine(client)  # type: ignore[arg-type]
    with engine.reads_kept():
        first = engine.image("repo:one")
        assert first is not None and engine.image("repo:one") is first
        assert engine.require(ID) is first  # the id it found: the same image
        assert engine.image("repo:none") is None and engine.image("repo:none") is None
    assert client.asked == ["repo:one", "repo:none"]


def test_a_write_drops_what_was_kept() -> None:
    client = FakeClient()
    engine = Engine(client)  # type: ignore[arg-type]
    with engine.reads_kept():
        assert engine.image("repo:two") is None
        engine.tag(ID, "repo:two")
        moved = engine.image("repo:two")
        assert moved is not None and moved.id == ID and "repo:two" in moved.tags
    assert client.asked == ["repo:two", "repo:two"]


def test_outside_every_lookup_asks() -> None:
    client = FakeClient()
    engine = Engine(client)  # type: ignore[arg-type]
    engine.image("repo:one")
    engine.image("repo:one")
    with engine.reads_kept():
        engine.image("repo:one")
    engine.image("repo:one")
    assert client.asked == ["repo:one"] * 4
