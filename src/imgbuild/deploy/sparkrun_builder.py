"""imgbuild as a sparkrun builder (`builder: imgbuild`, a `sparkrun.plugins` entry point; imgbuild never imports
it): runs `imgbuild -C PROJECT build VARIANT --json` and hands sparkrun the immutable tag it printed.

What it does in each of sparkrun 0.4.2's modes (docs/launching.md): `local`/`push` build here; `delegated` builds
on the head node over sparkrun's own SSH (`orchestration.primitives.run_script_on_host`, as its eugr builder does);
`offline` in the builder context adds `--offline` (nothing fetched); `builder_config.registry` makes a published
variant the image (`pull_ref` and `prepare` give its digest, from `imgbuild history --registry`); a `container`
already pinned by digest (what `sparkrun export recipe --realize` writes) is the image as it is; the image's
labels are what `collect_container_labels` reports. Everything it asks of imgbuild goes through the command line
and its `--json` documents, the one stable interface across the two Python versions."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

from sparkrun.builders.base import BuilderPlugin

from imgbuild.deploy.sparkrun_cli import (
    ImgbuildBuildError,
    build_argv,
    history_argv,
    is_url,
    json_of,
    run,
    run_build,
)
from imgbuild.deploy.sparkrun_pins import pinned, published, version_info

SPARKRUN_PLUGIN_API_VERSION = 1
KEYS = frozenset({"project", "revision", "variant", "platform", "command", "registry"})


def config_of(recipe: Any) -> dict[str, Any]:
    return dict(getattr(recipe, "builder_config", None) or {})


def variant_of(recipe: Any) -> str | None:
    cfg = config_of(recipe)
    if cfg.get("variant"):
        return str(cfg["variant"])
    meta = (getattr(recipe, "metadata", None) or {}).get("imgbuild") or {}
    return str(meta["variant"]) if meta.get("variant") else None


def problems(recipe: Any) -> list[str]:
    """What keeps `builder_config` from naming one build (empty when it does)."""
    cfg = config_of(recipe)
    out = [f"unknown builder_config key {k!r} (known: {', '.join(sorted(KEYS))})" for k in sorted(set(cfg) - KEYS)]
    if not cfg.get("project"):
        out.append("builder_config.project is required: the imgbuild project (a directory, or a git URL + revision)")
    if variant_of(recipe) is None:
        out.append("builder_config.variant is required: the image variant to build (a file in images/)")
    return out


def clone_dir(url: str, cache: Path) -> Path:
    return cache / hashlib.sha256(url.encode()).hexdigest()[:16]


def local_project(cfg: dict[str, Any]) -> str:
    """The project directory to build: `project`, or a clone of it at `revision` when it is a git URL."""
    project = str(cfg["project"])
    if is_url(project):
        return str(checkout(project, cfg.get("revision"), Path.home() / ".cache/imgbuild/sparkrun-projects"))
    return project


def checkout(url: str, revision: str | None, cache: Path) -> Path:
    """A clone of `url` at `revision` (default: the remote's HEAD), kept under `cache` keyed by the URL."""
    where = clone_dir(url, cache)
    if not (where / ".git").exists():
        where.parent.mkdir(parents=True, exist_ok=True)
        _git("clone", "--quiet", url, str(where))
    _git("-C", str(where), "fetch", "--quiet", "origin", revision or "HEAD")
    _git("-C", str(where), "checkout", "--quiet", "--detach", "FETCH_HEAD")
    return where


def _git(*args: str) -> None:
    done = run(["git", *args])
    if done.returncode != 0:
        raise ImgbuildBuildError(f"git {' '.join(args)}: {done.stderr.strip()}", done.returncode)


def published_ref(cfg: dict[str, Any], project: str, variant: str, container: str) -> str | None:
    """The published image by digest when `builder_config.registry` names a registry that has the variant."""
    if not cfg.get("registry"):
        return None
    argv = history_argv(cfg, project, variant)
    return published(json_of(argv, run(argv), "history"), container)


def offline_of(builder_context: Any) -> bool:
    """sparkrun puts `offline: True` in the builder context of an offline launch (`core/launcher.py`)."""
    return bool(builder_context and builder_context.get("offline"))


class ImgbuildBuilder(BuilderPlugin):  # type: ignore[misc]  # sparkrun is not typed for mypy here
    """Builds the recipe's variant with imgbuild and points the recipe at the immutable tag it made."""

    builder_name = "imgbuild"

    def prepare(
        self,
        image: str,
        recipe: Any,
        hosts: list[str],
        config: Any = None,
        dry_run: bool = False,
        transfer_mode: str = "local",
        ssh_kwargs: dict[str, Any] | None = None,
        builder_context: Any = None,
    ) -> str:
        del config  # imgbuild keeps its own cache (IMGBUILD_CACHE)
        if pinned(image):  # a realized recipe (`export recipe --realize`): that image, built nothing; sparkrun pulls it
            return image
        bad = problems(recipe)
        if bad:
            raise ImgbuildBuildError("; ".join(bad), 3)
        cfg, variant = config_of(recipe), str(variant_of(recipe))  # problems() checked both
        offline = offline_of(builder_context)
        if not offline and cfg.get("registry"):  # a published variant is the image; offline, no registry is asked
            ref = published_ref(cfg, local_project(cfg), variant, image)
            if ref is not None:
                return ref
        if transfer_mode == "delegated" and not dry_run:  # built on the head; a dry run plans here (no side effect)
            from imgbuild.deploy import sparkrun_head

            head = hosts[0] if hosts else "localhost"
            return sparkrun_head.build_on_head(cfg, variant, head, ssh_kwargs or {}, offline=offline)
        project = local_project(cfg)
        return run_build(build_argv(cfg, project, variant, dry_run=dry_run, offline=offline), variant)

    def pull_ref(self, image: str, recipe: Any, config: Any = None) -> str | None:
        """The published image by digest (`builder_config.registry` names a registry that has the variant; an image
        already pinned by digest as it is), or None: a local build, which has no registry digest to pin. Reads the
        registry; builds and clones nothing."""
        del config
        if pinned(image):
            return image
        if problems(recipe) or not config_of(recipe).get("registry"):
            return None
        cfg = config_of(recipe)
        project = str(cfg["project"])
        if is_url(project):  # a clone is what pull_ref may not make; the cached one, if any, is read
            where = clone_dir(project, Path.home() / ".cache/imgbuild/sparkrun-projects")
            if not (where / ".git").exists():
                return None
            project = str(where)
        return published_ref(cfg, project, str(variant_of(recipe)), image)

    def collect_container_labels(self, container_name: str, host: str, ssh_kwargs: dict[str, Any]) -> dict[str, str]:
        """The image's pins, patches and inputs digest from its labels (`docker inspect` over sparkrun's SSH, as the
        base class does), instead of every label flattened: `imgbuild.files` alone is a screenful. Never raises."""
        try:
            from sparkrun.orchestration.primitives import run_script_on_host

            script = f"docker inspect --format '{{{{json .Config.Labels}}}}' {shlex.quote(container_name)}"
            done = run_script_on_host(host, script, ssh_kwargs=ssh_kwargs, timeout=15)
            labels = json.loads(done.stdout.strip() or "{}") if done.returncode == 0 else {}
            return version_info(labels) if isinstance(labels, dict) else {}
        except Exception:  # noqa: BLE001 - label collection never blocks a launch (sparkrun's rule)
            return {}

    def validate_recipe(self, recipe: Any) -> list[Any]:
        return [self.recipe_error(p) for p in problems(recipe)]
