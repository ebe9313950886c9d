"""`imgbuild smoke`: smoke-test a variant's image, or any image by reference."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.build import BaseOpt, PlatformOpt, RepoOpt, options
from imgbuild.cli.options import JsonOpt
from imgbuild.errors import ConfigError, SmokeError, UsageError

if TYPE_CHECKING:
    from imgbuild.smoke.checks import SmokeReport, SmokeRun


def smoke_cmd(
    targets: Annotated[list[str], typer.Argument(help="Variant names (their current image) or image references.")],
    base: BaseOpt = None,
    repository: RepoOpt = None,
    platform: PlatformOpt = None,
    static: Annotated[
        bool, typer.Option("--static", help="Config and file checks only; run nothing in the image.")
    ] = False,
    pub_key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="cosign public key: also verify the signature of what a registry reference names and the "
            "platform image's SPDX SBOM (registry references only; see `publish --sign --sbom`).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Smoke-test images: config, file states, then runtime (under qemu if the arch differs).

    A VARIANT is checked against the current plan (build it first), an IMAGE against its
    own labels. With --key, a registry image's signature and SBOM are verified too.
    Exit status 8 when a check fails or the signature or the SBOM is not verified.

    Examples:

      imgbuild smoke latest engram-mem --base skeleton

      imgbuild smoke vllm-dsv41:latest --json

      imgbuild smoke REG/vllm-dsv41:latest --static --platform linux/arm64 --key cosign.pub
    """
    from imgbuild.builder import locate
    from imgbuild.builder import runner as engine
    from imgbuild.cli.options import load_project
    from imgbuild.config.models import check_platform  # image references take --platform too, without a project
    from imgbuild.engine import Engine
    from imgbuild.project import Project
    from imgbuild.publish import signing
    from imgbuild.smoke.checks import SmokeRun, expected_from_labels, smoke
    from imgbuild.smoke.localize import is_registry_ref, localize, nowhere

    try:
        project: Project | None = load_project()
    except ConfigError:  # image references need no project
        project = None
    check_platform(platform, allow_all=True)
    opts = options(base, repository)
    variant_names = [t for t in targets if project is not None and t in project.variants]
    if pub_key is not None:
        for target in targets:
            if target in variant_names or not is_registry_ref(target):
                what = "a variant of this project" if target in variant_names else "a local name"
                raise UsageError(f"--key checks what a registry holds; {target!r} is {what}", hint="pass host/repo:tag")
        signing.key_file(pub_key, "--key")
    eng = Engine.connect()  # after the checks of what was asked: a bad option needs no daemon
    reports: list[SmokeReport] = []
    finder = engine.importer_finder(project) if project is not None else None
    if variant_names:  # each platform of each variant, where the plan says it is (nothing pulled or built)
        assert project is not None
        selection = project.select(variant_names, platform)
        reports += locate.smoke_variants(eng, project, selection, opts, runtime=not static, importers=finder)
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
            raise nowhere(ref, project.variants if project is not None else None, repository)
        expected = expected_from_labels(info)
        # a variant of this project: its smoke commands, and its release names the modules importing the files
        if project is not None and finder and (known := project.variants.get(expected.variant or "")) is not None:
            importers = functools.partial(finder, tuple(f.path for f in expected.files))
            expected = dataclasses.replace(expected, smoke=known.smoke, importers=importers)
        report = smoke(eng, ref, expected, runtime=not static)
        if pub_key is not None:
            report = dataclasses.replace(
                report, supply_chain=signing.check_published(target, ref, pub_key, info.labels)
            )
        reports.append(report)
    _print_and_exit(SmokeRun(reports=tuple(reports)), as_json=as_json)


def _print_and_exit(run: SmokeRun, *, as_json: bool) -> None:
    """Every report (and --key's verdicts); exit 8 when a check failed or a signature or an SBOM is not verified."""
    from imgbuild.report.documents import images as docs
    from imgbuild.report.images import checks_table, file_matrix, supply_chain_lines
    from imgbuild.report.tables import console, print_json
    from imgbuild.smoke.checks import summary

    failed = run.failed
    if as_json:
        print_json(docs.SMOKE.of(run))
    else:
        for r in run.reports:
            console.print(checks_table(r))
            if r.supply_chain is not None:
                for line in supply_chain_lines(r.supply_chain):
                    console.print(line, highlight=False)
        console.print(file_matrix([(r.title, r.files) for r in run.reports]))
        console.print(summary(run.reports))
    if failed:  # under --json the document above already says what failed: only the error line (stderr)
        raise SmokeError(
            "smoke test failed: " + "; ".join(failed),
            hint="see the table above (or --json) for each failing check",
            reported=as_json,
        )
