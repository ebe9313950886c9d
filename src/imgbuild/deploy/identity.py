"""An image's immutable tag, checked against what it is (pure): `REPO:<version>-<12 hex>` whose hex is the image's
inputs digest. A one-platform image carries its digest in its `imgbuild.inputs` label. A join (the multi-platform
image over a variant's platforms) does not: the engine shows it with one part's config, so its labels are that
part's. Its digest is recomputed from its parts (`plan.builds.join_inputs` over their immutable tags), the images
of the same build, one per platform, found among the variant's images; a tag that only looks immutable is not taken.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

from imgbuild.engine import ImageInfo
from imgbuild.plan import labels as lbl
from imgbuild.plan.builds import join_inputs

IMMUTABLE_TAG = re.compile(r"-([0-9a-f]{12})$")  # <version>-<inputs[:12]>
SAME_BUILD = (f"{lbl.PREFIX}upstream.commit", f"{lbl.PREFIX}series", f"{lbl.PREFIX}patches", f"{lbl.PREFIX}files")


def _own_tags(info: ImageInfo, repo: str) -> list[str]:
    """`info`'s immutable tags in `repo` whose digest is its own inputs label."""
    want = info.labels.get(lbl.INPUTS, "").removeprefix("sha256:")[:12]
    return [t for t in info.tags if t.rpartition(":")[0] == repo and want and t.endswith(f"-{want}")]


def _same_build(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    return all(a.get(k) == b.get(k) for k in SAME_BUILD)


def join_tag(info: ImageInfo, ref: str, images: Sequence[ImageInfo]) -> bool:
    """Whether the tag `ref` of `info` is a join's immutable tag: its digest is `join_inputs` over one immutable
    tag per platform, for two or more platforms, of the images among `images` built the same way as `info`."""
    repo, _, tag = ref.rpartition(":")
    m = IMMUTABLE_TAG.search(tag)
    if m is None:
        return False
    by_arch: dict[str, list[str]] = {}
    for other in images:
        if other.id != info.id and _same_build(other.labels, info.labels):
            for own in _own_tags(other, repo):
                by_arch.setdefault(other.platform.arch, []).append(own)
    arches = sorted(by_arch)
    for n in range(2, len(arches) + 1):
        for chosen in itertools.combinations(arches, n):
            for refs in itertools.product(*(by_arch[a] for a in chosen)):
                if join_inputs(dict(zip(chosen, refs, strict=True)))[:12] == m.group(1):
                    return True
    return False


def join_ref(repository: str | None, info: ImageInfo, images: Sequence[ImageInfo]) -> str | None:
    """The join's immutable tag among `info`'s tags (in `repository` when given) that its parts among `images`
    give; None when it has none (a one-platform image's own tag is `recipes.immutable_ref`'s)."""
    for ref in sorted(info.tags):
        repo, _, tag = ref.rpartition(":")
        if "/" in tag or not repo or (repository and repo != repository):
            continue
        if join_tag(info, ref, images):
            return ref
    return None
