"""`imgbuild smoke` as a library call: which targets are this project's variants and which are image references
(`targets_of`, checked before any engine is asked), then each smoke-tested where it is, nothing pulled or built but
a registry reference's one platform (`run` -> `SmokeRun`). It sits above `builder/` (a variant's images are where
its plan says, `builder/locate.py`) and `publish/` (`--key` verifies a published image with cosign)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imgbuild.builder import locate
from imgbuild.builder.options import BuildOptions
from imgbuild.engine import Engine
from imgbuild.errors import UsageError
from imgbuild.platforms import Platform
from imgbuild.project import Project
from imgbuild.publish import signing
from imgbuild.smoke.checks import expected_from_labels, smoke
from imgbuild.smoke.expected import importer_finder
from imgbuild.smoke.localize import is_registry_ref, localize, nowhere
from imgbuild.smoke.report import SmokeReport, SmokeRun


@dataclass(frozen=True)
class Targets:
    """What `smoke` was asked to check, sorted: the project's variants (each platform the selection names) and
    image references (one platform each, checked against their own labels)."""

    variants: tuple[str, ...]
    images: tuple[str, ...]
    platform: str | None  # --platform as given (None: each variant's first declared platform; the host's)
    key: Path | None  # --key: verify each registry reference's signature and SBOM


def targets_of(project: Project | None, targets: Sequence[str], platform: str | None, key: Path | None) -> Targets:
    """The targets sorted into variants and image references; a bad --platform or --key is a UsageError (a
    ConfigError for a missing key file) before any work."""
    several = Platform.parse_list(platform, several=True) if platform is not None else None
    variants = tuple(t for t in targets if project is not None and t in project.variants)
    images = tuple(t for t in targets if t not in variants)
    if key is not None:
        for target in targets:
            if target in variants or not is_registry_ref(target):
                what = "a variant of this project" if target in variants else "a local name"
                raise UsageError(f"--key checks what a registry holds; {target!r} is {what}", hint="pass host/repo:tag")
        signing.key_file(key, "--key")
    if images and platform is not None and (several == () or len(several or ()) > 1):
        raise UsageError(
            f"--platform {platform}: an image reference is checked for one platform",
            hint="give one platform (e.g. --platform linux/arm64), or name a variant to check each of its platforms",
        )
    return Targets(variants, images, platform, key)


def run(
    engine: Engine, project: Project | None, targets: Targets, options: BuildOptions, *, static: bool = False
) -> SmokeRun:
    """Smoke-test every target (`static`: config and file checks only, nothing run in the image). A variant's
    image missing for the current inputs is a SmokeError that says to build it; a check that fails is in the run's
    reports (`SmokeRun.ok`), never raised."""
    reports: list[SmokeReport] = []
    finder = importer_finder(project) if project is not None else None
    if targets.variants:  # each platform of each variant, where the plan says it is (nothing pulled or built)
        assert project is not None
        selection = project.select(targets.variants, targets.platform)
        reports += locate.smoke_variants(engine, project, selection, options, runtime=not static, importers=finder)
    for target in targets.images:
        ref = localize(engine, target, targets.platform)  # a registry reference: pull that platform by digest
        info = engine.image(ref)
        if info is None:
            raise nowhere(ref, project.variants if project is not None else None, options.repository)
        expected = expected_from_labels(info)
        # a variant of this project: its smoke commands, and its release names the modules importing the files
        if project is not None and finder and (known := project.variants.get(expected.variant or "")) is not None:
            importers = functools.partial(finder, tuple(f.path for f in expected.files))
            expected = dataclasses.replace(expected, smoke=known.smoke, importers=importers)
        report = smoke(engine, ref, expected, runtime=not static)
        if targets.key is not None:
            chain = signing.check_published(target, ref, targets.key, info.labels)
            report = dataclasses.replace(report, supply_chain=chain)
        reports.append(report)
    return SmokeRun(reports=tuple(reports))
