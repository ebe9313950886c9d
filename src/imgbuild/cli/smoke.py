"""`imgbuild smoke`: smoke-test a variant's image, or any image by reference."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.build import BaseOpt, PlatformOpt, RepoOpt, options
from imgbuild.cli.options import JsonOpt
from imgbuild.errors import ConfigError, DockerError, ExitCode, SmokeError, UsageError

if TYPE_CHECKING:
    from imgbuild.smoke.checks import SmokeReport


def smoke_cmd(
    targets: Annotated[list[str], typer.Argument(help="Variant names (their current image) or image references.")],
    base: BaseOpt = None,
    repository: RepoOpt = None,
    platform: PlatformOpt = None,
    static: Annotated[
        bool, typer.Option("--static", help="Config and file checks only; run nothing in the image.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Smoke-test images: config, file states, then runtime (under qemu if the arch differs).

    A VARIANT is checked against the current plan (build it first), an IMAGE against its
    own labels. Exit status 8 when a check fails.

    Examples:

      imgbuild smoke latest engram-mem --base skeleton

      imgbuild smoke vllm-dsv41:latest --json
    """
    from imgbuild.builder import runner as engine
    from imgbuild.config.models import check_platform  # image references take --platform too, without a project
    from imgbuild.engine import Engine
    from imgbuild.project import Project, load_project
    from imgbuild.report.images import checks_table, file_matrix
    from imgbuild.report.tables import console, print_json
    from imgbuild.smoke.checks import expected_from_labels, smoke, summary
    from imgbuild.smoke.inspect import localize

    try:
        project: Project | None = load_project()
    except ConfigError:  # image references need no project
        project = None
    check_platform(platform, allow_all=True)
    opts = options(base, repository)
    eng = Engine.connect()  # after the checks of what was asked: a bad option needs no daemon
    reports: list[SmokeReport] = []
    finder = engine.importer_finder(project) if project is not None else None
    variant_names = [t for t in targets if project is not None and t in project.variants]
    if variant_names:
        assert project is not None
        plan = engine.prepare(eng, project, project.select(variant_names, platform), opts)
        for ib in plan.images:  # each platform of a multi-platform image
            if eng.image(ib.immutable_ref) is None:
                raise SmokeError(
                    f"{ib.variant}: no image {ib.immutable_ref} for the current inputs",
                    hint=f"build it first: imgbuild build {ib.variant}" + (f" --base {opts.base}" if opts.base else ""),
                )
            reports.append(smoke(eng, ib.immutable_ref, engine.expected_for(ib, finder), runtime=not static))
    images = [t for t in targets if t not in variant_names]
    if images and platform is not None and (platform == "all" or "," in platform):
        raise UsageError(
            f"--platform {platform}: an image reference is checked for one platform",
            hint="give one platform (e.g. --platform linux/arm64), or name a variant to check each of its platforms",
        )
    for target in images:
        ref = localize(eng, target, platform)  # a registry reference: pull that platform by digest
        info = eng.image(ref)
        if info is None:
            raise DockerError(
                f"{ref!r} is neither a variant of this project nor an image in the local store",
                hint="variants are the files in images/; images are names like vllm-dsv41:latest",
            )
        expected = expected_from_labels(info)
        # a variant of this project: its smoke commands, and its release names the modules importing the files
        if project is not None and finder and (known := project.variants.get(expected.variant or "")) is not None:
            importers = functools.partial(finder, tuple(f.path for f in expected.files))
            expected = dataclasses.replace(expected, smoke=known.smoke, importers=importers)
        reports.append(smoke(eng, ref, expected, runtime=not static))
    if as_json:
        print_json("smoke", {"ok": all(r.ok for r in reports), "reports": [r.to_json() for r in reports]})
    else:
        for r in reports:
            console.print(checks_table(r))
        console.print(file_matrix([(r.title, r.files) for r in reports]))
        console.print(summary(reports))
    bad = [r for r in reports if not r.ok]
    if bad and as_json:
        raise typer.Exit(ExitCode.SMOKE)  # the JSON above already says what failed
    if bad:
        raise SmokeError(
            "smoke test failed: " + "; ".join(f"{r.image}: {len(r.failures)} failing checks" for r in bad),
            hint="see the table above (or --json) for each failing check",
        )
