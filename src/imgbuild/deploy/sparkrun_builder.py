"""imgbuild as a sparkrun builder (`builder: imgbuild`, a `sparkrun.plugins` entry point; imgbuild never imports
it): runs `imgbuild -C PROJECT build VARIANT --json` and hands sparkrun the immutable tag it printed."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Any

from sparkrun.builders.base import BuilderPlugin

from imgbuild import jsondoc, proc  # standard library only: the --json contract, the one process funnel

SPARKRUN_PLUGIN_API_VERSION = 1
KEYS = frozenset({"project", "revision", "variant", "platform", "command"})


class ImgbuildBuildError(RuntimeError):
    """`imgbuild build` failed: its message and hint, and its exit code (docs/reference.md, Exit codes)."""

    def __init__(self, message: str, exit_code: int, hint: str = "") -> None:
        super().__init__(f"imgbuild build failed (exit {exit_code}): {message}" + (f" ({hint})" if hint else ""))
        self.exit_code = exit_code
        self.hint = hint


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


def checkout(url: str, revision: str | None, cache: Path) -> Path:
    """A clone of `url` at `revision` (default: the remote's HEAD), kept under `cache` keyed by the URL."""
    where = cache / hashlib.sha256(url.encode()).hexdigest()[:16]
    if not (where / ".git").exists():
        where.parent.mkdir(parents=True, exist_ok=True)
        _git("clone", "--quiet", url, str(where))
    _git("-C", str(where), "fetch", "--quiet", "origin", revision or "HEAD")
    _git("-C", str(where), "checkout", "--quiet", "--detach", "FETCH_HEAD")
    return where


def _git(*args: str) -> None:
    done = _run(["git", *args])
    if done.returncode != 0:
        raise ImgbuildBuildError(f"git {' '.join(args)}: {done.stderr.strip()}", done.returncode)


def _run(argv: list[str]) -> proc.CompletedProcess[str]:
    try:
        return proc.run(argv, text=True)
    except proc.ToolNotFound as exc:
        hint = "install imgbuild beside sparkrun, or set builder_config.command"
        raise ImgbuildBuildError(str(exc), 7, hint) from exc


def build_argv(cfg: dict[str, Any], project: str, variant: str, *, dry_run: bool) -> list[str]:
    command = cfg.get("command") or os.environ.get("IMGBUILD_COMMAND") or "imgbuild"
    argv = [*(shlex.split(command) if isinstance(command, str) else command), "-C", project, "build", variant, "--json"]
    if cfg.get("platform"):
        argv += ["--platform", str(cfg["platform"])]
    return [*argv, "--dry-run"] if dry_run else argv


def built_ref(doc: dict[str, Any], variant: str) -> str:
    """The immutable reference `build --json` (or `--dry-run --json`) reports for `variant`."""
    refs = {i.get("index_ref") or i["immutable"] for i in doc.get("images", []) if i.get("variant") == variant}
    if len(refs) != 1:
        raise ImgbuildBuildError(f"imgbuild build --json named {len(refs)} images of variant {variant}", 1)
    return str(refs.pop())


def check_schema(doc: dict[str, Any], name: str, argv: list[str], exit_code: int) -> None:
    """Refuse a document of another name or version than the one this plugin reads (jsondoc.VERSIONS)."""
    problem = jsondoc.mismatch(doc, name)
    if problem is not None:
        raise ImgbuildBuildError(
            f"the --json document of `{shlex.join(argv)}` {problem}",
            exit_code or 1,
            "run the imgbuild this plugin comes from (builder_config.command or $IMGBUILD_COMMAND), "
            "or install the plugin of that imgbuild",
        )


def run_build(argv: list[str], variant: str) -> str:
    done = _run(argv)
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        doc = None
    if done.returncode != 0 or not isinstance(doc, dict):
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict):
            check_schema(doc, "error", argv, done.returncode)
            code = int(err.get("exit_code") or done.returncode)
            raise ImgbuildBuildError(str(err.get("message")), code, str(err.get("hint") or ""))
        detail = done.stderr.strip().splitlines()[-1:] or [done.stdout.strip()[:200]]
        raise ImgbuildBuildError(f"{shlex.join(argv)}: {detail[0]}", done.returncode or 1)
    check_schema(doc, "build-plan" if "--dry-run" in argv else "build", argv, 0)
    if doc.get("ok") is False:
        raise ImgbuildBuildError("the build's smoke test failed (see `imgbuild build` without --json)", 8)
    return built_ref(doc, variant)


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
        del image, hosts, config, transfer_mode, ssh_kwargs, builder_context  # imgbuild builds offline, locally
        bad = problems(recipe)
        if bad:
            raise ImgbuildBuildError("; ".join(bad), 3)
        cfg, variant = config_of(recipe), str(variant_of(recipe))  # problems() checked both
        project = str(cfg["project"])
        if "://" in project or project.startswith("git@"):  # a git URL: build a clone of it
            project = str(checkout(project, cfg.get("revision"), Path.home() / ".cache/imgbuild/sparkrun-projects"))
        return run_build(build_argv(cfg, project, variant, dry_run=dry_run), variant)

    def pull_ref(self, image: str, recipe: Any, config: Any = None) -> str | None:
        del image, recipe, config
        return None  # a local build: no registry digest to pin

    def validate_recipe(self, recipe: Any) -> list[Any]:
        return [self.recipe_error(p) for p in problems(recipe)]
