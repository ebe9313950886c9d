"""Layer images written without BuildKit (layerimage.py) hold what BuildKit builds from the layer Dockerfile.

The layer tar (so the diff_id) and the config are BuildKit's, byte for byte;
only the gzip bytes of the new layer differ (Python's deflate, not Go's).
Docker 26 with the containerd image store only (the classic path builds layers with BuildKit).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from imgbuild.images import labels, ocilayout
from imgbuild.images.build import OCI_LAYOUT_DIR, BuildOptions, prepare
from imgbuild.images.docker import Engine
from imgbuild.images.inputs import project_inputs
from imgbuild.project import Project
from tests.docker.conftest import MakeProject
from tests.support.registry_env import set_platforms
from tests.support.runner import Cli

pytestmark = pytest.mark.docker


def image_parts(layout: Path, image_id: str, platform: str) -> tuple[dict[str, object], bytes, bytes]:
    """(manifest, config bytes, the top layer's uncompressed tar) of `platform`'s image under `image_id`."""
    found = ocilayout.platform_image(layout, image_id, platform)
    assert found is not None, (image_id, platform)
    _, manifest_bytes, config = found
    manifest = json.loads(manifest_bytes)
    top = manifest["layers"][-1]
    tar = gzip.decompress(ocilayout.blob_path(layout, top["digest"]).read_bytes())
    return manifest, config, tar


@pytest.mark.usefixtures("prefix")
@pytest.mark.parametrize("platforms", [None, "all"], ids=["one-platform", "two-platforms"])
def test_written_layer_holds_what_buildkit_builds(
    modern: Engine, make_project: MakeProject, cli: Cli, platforms: str | None
) -> None:
    project = make_project("lay1" if platforms is None else "lay2")
    if platforms:
        set_platforms(project, ["linux/arm64", "linux/amd64"])
    cache = Path(str(project) + "-cache")
    env = {"IMGBUILD_ECHO": "1", "IMGBUILD_CACHE": str(cache)}
    args = ["build", "--base", "skeleton", "--no-smoke", *(["--platform", platforms] if platforms else [])]
    proc = cli(project, *args, env=env)
    assert proc.returncode == 0, proc.stderr
    calls = [ln for ln in proc.stderr.splitlines() if ln.startswith("+ ")]
    exports = [c for c in calls if " buildx build " in c]
    n_platforms = 2 if platforms else 1
    assert len(exports) == n_platforms and all("imgbuild-export/" in c for c in exports), "\n".join(
        c for c in calls if "GET" not in c and " git " not in c
    )  # the base, once
    assert sum(c.startswith("+ imgbuild write-layer-image ") for c in calls) == 2, calls
    # both layers and both images in one load (and, for two platforms, one more naming each platform's manifest)
    assert sum(c.startswith("+ docker load") for c in calls) == n_platforms, calls

    layout = cache / OCI_LAYOUT_DIR
    proj = Project.load(project)
    plan, multi = prepare(modern, proj, proj.select(["latest", "engram-mem"], platforms), BuildOptions(base="skeleton"),
                          lambda _: None)  # fmt: skip
    epoch = labels.epoch(project_inputs(proj).created)
    builds = [(ml.tag, ml.context, list(ml.platforms)) for ml in multi.layers] if multi else []
    builds = builds or [(lb.tag, lb.context, [lb.platform]) for lb in plan.layers]
    assert len(builds) == 2
    written = {tag: modern.require(tag).id for tag, _, _ in builds}
    for tag, context, plats in builds:
        scratch = tag.replace(":layer-", ":buildkit-layer-")
        buildkit_id = modern.build(context, tags=[scratch], platform=",".join(plats), epoch=epoch, layout=layout)
        modern.untag(scratch)
        written_id = written[tag]
        assert written_id != buildkit_id  # the gzip bytes differ, so the manifests do
        for plat in plats:
            ours, our_config, our_tar = image_parts(layout, written_id, plat)
            _, their_config, their_tar = image_parts(layout, buildkit_id, plat)
            assert our_tar == their_tar, (tag, plat)  # same entries, headers, order: the same diff_id
            assert our_config == their_config, (tag, plat)  # same labels, history, rootfs diff_ids
            # BuildKit may name an inherited layer by its own gzip of the same tar, so only ours are checked
            assert ours["layers"][-1]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"  # type: ignore[index]

    again = cli(project, *args, "--force", env=env)  # the base is in the layout now: no BuildKit at all
    assert again.returncode == 0, again.stderr
    assert " buildx build " not in again.stderr, again.stderr
    assert again.stderr.count("+ imgbuild write-layer-image ") == 2, again.stderr
    assert {tag: modern.require(tag).id for tag in written} == written  # equal inputs, equal bytes


@pytest.mark.usefixtures("modern")
def test_forced_rebuild_gives_the_same_layer_ids(make_project: MakeProject, cli: Cli) -> None:
    project = make_project("layforce")
    cache = Path(str(project) + "-cache")
    env = {"IMGBUILD_CACHE": str(cache)}
    first = cli(project, "build", "--base", "skeleton", "--no-smoke", "--json", env=env)
    assert first.returncode == 0, first.stderr
    layers = {item["tag"]: item["image_id"] for item in json.loads(first.stdout)["layers"]}
    assert len(layers) == 2 and all(item["built"] for item in json.loads(first.stdout)["layers"])
    (cache / OCI_LAYOUT_DIR / ocilayout.EXPORTS).unlink()  # the base is exported again: the same bytes
    again = cli(project, "build", "--base", "skeleton", "--no-smoke", "--force", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert {item["tag"]: item["image_id"] for item in json.loads(again.stdout)["layers"]} == layers
