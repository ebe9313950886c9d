"""The sparkrun plugin's side of imgbuild's command line: the argv it runs (`imgbuild -C PROJECT build VARIANT
--json`, `history --registry --json`), the `--json` documents it reads back, checked to be the name and version it
knows (jsondoc), and the error it raises (ImgbuildBuildError, with imgbuild's message, hint and exit code).

Shared by the plugin (sparkrun_builder.py, which builds here) and its delegated mode (sparkrun_head.py, which
builds on sparkrun's head node); standard library and imgbuild's own stdlib-only modules, no sparkrun."""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

from imgbuild import jsondoc, proc  # standard library only: the --json contract, the one process funnel


class ImgbuildBuildError(RuntimeError):
    """`imgbuild build` failed: its message and hint, and its exit code (docs/reference.md, Exit codes)."""

    def __init__(self, message: str, exit_code: int, hint: str = "") -> None:
        super().__init__(f"imgbuild build failed (exit {exit_code}): {message}" + (f" ({hint})" if hint else ""))
        self.exit_code = exit_code
        self.hint = hint


def is_url(project: str) -> bool:
    return "://" in project or project.startswith("git@")


def run(argv: list[str]) -> proc.CompletedProcess[str]:
    try:
        return proc.run(argv, text=True)
    except proc.ToolNotFound as exc:
        hint = "install imgbuild beside sparkrun, or set builder_config.command"
        raise ImgbuildBuildError(str(exc), 7, hint) from exc


def command_of(cfg: dict[str, Any]) -> list[str]:
    command = cfg.get("command") or os.environ.get("IMGBUILD_COMMAND") or "imgbuild"
    return [*(shlex.split(command) if isinstance(command, str) else command)]


def build_argv(cfg: dict[str, Any], project: str, variant: str, *, dry_run: bool, offline: bool = False) -> list[str]:
    argv = [*command_of(cfg), "-C", project, "build", variant, "--json"]
    if cfg.get("platform"):
        argv += ["--platform", str(cfg["platform"])]
    if offline:
        argv.append("--offline")
    return [*argv, "--dry-run"] if dry_run else argv


def history_argv(cfg: dict[str, Any], project: str, variant: str) -> list[str]:
    return [*command_of(cfg), "-C", project, "history", variant, "--registry", str(cfg["registry"]), "--json"]


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


def json_of(argv: list[str], done: proc.CompletedProcess[str], name: str) -> dict[str, Any]:
    """The `--json` document `argv` printed, checked to be `name` at the version this plugin reads."""
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
    check_schema(doc, name, argv, 0)
    return doc


def run_build(argv: list[str], variant: str) -> str:
    return built_ref(build_doc(argv, run(argv)), variant)


def build_doc(argv: list[str], done: proc.CompletedProcess[str]) -> dict[str, Any]:
    doc = json_of(argv, done, "build-plan" if "--dry-run" in argv else "build")
    if doc.get("ok") is False:
        raise ImgbuildBuildError("the build's smoke test failed (see `imgbuild build` without --json)", 8)
    return doc
