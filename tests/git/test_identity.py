"""A join's immutable tag is recognised from its parts (pure): `recipe` and `history` accept it, a look-alike not."""

from __future__ import annotations

from imgbuild.deploy.identity import join_ref, join_tag
from imgbuild.engine import ImageInfo
from imgbuild.plan.builds import join_inputs

BUILD = {"imgbuild.variant": "latest", "imgbuild.series": "s1", "imgbuild.patches": "{}", "imgbuild.files": "{}"}


def _image(image_id: str, arch: str, tags: tuple[str, ...], inputs: str, **more: str) -> ImageInfo:
    labels = {**BUILD, "imgbuild.inputs": inputs, **more}
    return ImageInfo(image_id, tags, (), "linux", arch, "", None, None, (), labels, (), 0)


def test_a_join_tag_is_its_parts_join_inputs_and_a_look_alike_is_not() -> None:
    arm = _image("sha256:" + "a" * 64, "arm64", ("r:1.0.0-" + "a" * 12,), "a" * 64)
    amd = _image("sha256:" + "b" * 64, "amd64", ("r:1.0.0-" + "b" * 12,), "b" * 64)
    digest = join_inputs({"arm64": "r:1.0.0-" + "a" * 12, "amd64": "r:1.0.0-" + "b" * 12})
    # the engine shows the join with its host part's labels (amd64's here): its tag's digest is not that label's
    join = _image("sha256:" + "c" * 64, "amd64", ("r:latest", f"r:1.0.0-{digest[:12]}"), "b" * 64)
    assert join_ref("r", join, [arm, amd, join]) == f"r:1.0.0-{digest[:12]}"
    assert join_ref(None, join, [arm, amd, join]) == f"r:1.0.0-{digest[:12]}"
    assert join_ref("other", join, [arm, amd, join]) is None  # another repository
    # a tag that only looks immutable, or parts of another build, are not taken
    fake = _image("sha256:" + "d" * 64, "amd64", ("r:1.0.0-" + "0" * 12,), "b" * 64)
    assert join_ref("r", fake, [arm, amd, fake]) is None
    other = _image("sha256:" + "a" * 64, "arm64", ("r:1.0.0-" + "a" * 12,), "a" * 64, **{"imgbuild.series": "s2"})
    assert not join_tag(join, f"r:1.0.0-{digest[:12]}", [other, amd, join])
    assert join_ref("r", join, [join]) is None  # its parts gone: nothing to check it against
