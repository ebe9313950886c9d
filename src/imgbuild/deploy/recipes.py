"""`imgbuild recipe VARIANT --profile NAME`: pin the image, render, write the sparkrun recipe.

The image is pinned by a repository reference sparkrun's distribution can tag on a node, never a moving
tag or a bare image id: the immutable `REPO:<version>-<inputs digest>` tag of the local image, a given
`REF@sha256:`, or (--registry) the published index digest. --builder names `builder: imgbuild` instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from imgbuild.deploy import launch
from imgbuild.deploy import profiles as deploy
from imgbuild.deploy.launch import Launch, Pinned
from imgbuild.errors import ConfigError, DockerError, RegistryError, UsageError
from imgbuild.patches.variants import ResolvedVariant
from imgbuild.project import Project

IMMUTABLE_TAG = re.compile(r"-([0-9a-f]{12})$")  # <version>-<inputs[:12]>


def immutable_ref(repository: str | None, tags: tuple[str, ...], inputs: str | None) -> str | None:
    """The image's `REPO:<version>-<inputs digest>` tag among its tags (in `repository` when given).

    With the image's `imgbuild.inputs` label the digest in the tag must be the label's: a tag that
    only looks immutable is not taken.
    """
    want = (inputs or "").removeprefix("sha256:")[:12] or None
    for ref in sorted(tags):
        repo, _, tag = ref.rpartition(":")
        if "/" in tag or not repo or (repository and repo != repository):
            continue
        m = IMMUTABLE_TAG.search(tag)
        if m and (want is None or m.group(1) == want):
            return ref
    return None


@dataclass(frozen=True)
class Written:
    launch: Launch
    recipe: Path
    serve: list[str]

    def to_json(self) -> dict[str, object]:
        return {
            "ok": True,
            "variant": self.launch.variant,
            "profile": self.launch.profile.name,
            "image": self.launch.image.ref,
            "image_id": self.launch.image.image_id,
            "found": self.launch.image.source,
            "platform": self.launch.platform,
            "env": self.launch.env,
            "recipe_env": self.launch.recipe_env(),
            "left_to_sparkrun": self.launch.left_to_sparkrun(),
            "builder": self.launch.builder.config() if self.launch.builder else None,
            "serve": self.serve,
            "recipe": str(self.recipe),
        }


def merged_env(variant: ResolvedVariant, profile: deploy.Profile) -> dict[str, str]:
    image_env = dict(variant.image.env)
    clash = sorted(set(image_env) & set(profile.env))
    if clash:
        raise ConfigError(
            f"{profile.where}: env {', '.join(clash)} is set by the image spec of {variant.name} (images/)",
            hint="set it in images/*.yaml only, so the image and its launch agree",
        )
    return {**image_env, **profile.env}


def _variant_tag(variant: ResolvedVariant) -> str:
    """`REPO:TAG`, the variant's first tag."""
    if not variant.image.repository or not variant.image.tags:
        raise ConfigError(f"variant {variant.name} has no image repository or tag", hint="set image: in images/")
    return f"{variant.image.repository}:{variant.image.tags[0]}"


def pin_image(variant: ResolvedVariant, *, image: str | None, registry: str | None) -> tuple[Pinned, str | None]:
    """The digest-pinned reference, and the image's platform when it was looked at."""
    from imgbuild.registry import reference

    if registry is not None:
        if image is not None:
            raise UsageError("--image and --registry cannot be used together")
        from imgbuild.registry import tools

        ref = reference.join(registry, _variant_tag(variant))
        found = tools.inspect(str(ref))
        if found is None:
            raise RegistryError(
                f"{ref} is not in the registry",
                hint=f"publish it first: imgbuild publish {variant.name} --registry ...",
            )
        return Pinned(f"{ref.name}@{found.digest}", None, f"published {ref}"), None
    if image is not None and "@sha256:" in image:
        reference.parse(image)  # a ConfigError names what is wrong with it
        return Pinned(image, None, "given"), None
    from imgbuild.engine import Engine

    wanted = image or _variant_tag(variant)
    info = Engine.connect().image(wanted)
    if info is None:
        raise DockerError(
            f"no image {wanted!r} in the local image store",
            hint=f"build it (`imgbuild build {variant.name}`), or give --image or --registry",
        )
    label = info.labels.get("imgbuild.variant")
    if image is None and label != variant.name:
        raise DockerError(
            f"{wanted} is not an imgbuild image of variant {variant.name} (label imgbuild.variant={label!r})",
            hint=f"rebuild it with `imgbuild build {variant.name}`, or name the image with --image",
        )
    tagged = immutable_ref(None if image else variant.image.repository, info.tags, info.labels.get("imgbuild.inputs"))
    if tagged is None:
        raise DockerError(
            f"{wanted} ({info.id[7:19]}) has no immutable tag (REPO:<version>-<inputs digest>); a bare image id "
            "has no repository, so sparkrun's distribution could not tag it on a node",
            hint=f"build it with `imgbuild build {variant.name}` (it tags it), or pin a published image: --registry",
        )
    return Pinned(tagged, info.id, f"local {wanted}"), str(info.platform)


def write_recipe(
    project: Project,
    variant_name: str,
    profile_name: str,
    *,
    out: Path,
    image: str | None = None,
    registry: str | None = None,
    builder: bool = False,
) -> Written:
    variant = project.variant(variant_name)
    profile = deploy.profile(project.root, profile_name)
    if profile.variant != variant.name:
        raise ConfigError(
            f"{profile.where}: profile {profile.name} runs variant {profile.variant}, not {variant.name}",
            hint=f"use `imgbuild recipe {profile.variant} --profile {profile.name}`, or change the profile's variant",
        )
    env = merged_env(variant, profile)
    if builder and (image is not None or registry is not None):
        raise UsageError("--builder cannot be used with --image or --registry: the builder makes the image")
    if builder:  # `container:` names the variant's tag; the builder replaces it with the one it builds
        pinned = Pinned(_variant_tag(variant), None, "builder imgbuild (replaced by the immutable tag it builds)")
        seen_platform = None
    else:
        pinned, seen_platform = pin_image(variant, image=image, registry=registry)
    platform = seen_platform or (variant.image.platforms[0] if variant.image.platforms else "linux/arm64")
    plugin = launch.Builder(str(project.root), variant.name, platform) if builder else None
    run = Launch(variant.name, profile, pinned, platform, env, plugin)
    comment = [
        f"Written by `imgbuild recipe {variant.name} --profile {profile.name}`; regenerate, do not edit.",
        f"Image: {pinned.ref} ({pinned.source}).",
        launch.recipe_comment(run),
        "Run: sparkrun run THIS_FILE --hosts H1,...,H8",
    ]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{variant.name}-{profile.name.lower()}.yaml"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(launch.render_yaml(launch.sparkrun_recipe(run), "\n".join(filter(None, comment))), encoding="utf-8")
    os.replace(tmp, path)
    return Written(run, path, launch.serve_args(profile))
