"""What smoke expects of an image the plan names (`expected_for`), and the release's modules that import its
planned files (`importer_finder`): shared by the smoke after each build and `smoke VARIANT`."""

from __future__ import annotations

import functools
from collections.abc import Callable

from imgbuild.plan import labels
from imgbuild.plan.builds import ImageBuild
from imgbuild.project import Project
from imgbuild.smoke.checks import Expected
from imgbuild.smoke.importcheck import kept_release_importers

ImporterFinder = Callable[[tuple[str, ...]], list[str]]  # planned files -> the release's modules importing them


def expected_for(ib: ImageBuild, importers: ImporterFinder | None = None) -> Expected:
    files = tuple(labels.file_labels(ib.plan))  # from the plan; its label says the same
    paths = tuple(f.path for f in files)
    return Expected(
        platform=ib.platform,
        files=files,
        site_packages=ib.base.site_packages,
        labels=ib.labels,
        smoke=ib.plan.variant.smoke,
        variant=ib.variant,
        base_ref=ib.base.ref,
        base_id=ib.base.image_id,
        layers=ib.layers,
        env=ib.plan.variant.image.env,
        importers=None if importers is None else (lambda: importers(paths)),
    )


def importer_finder(project: Project) -> ImporterFinder:
    """Each release's modules that import the given planned files of that upstream, scanned once per set
    of files and release (every pinned upstream: its patched files, its importers in its own release)."""

    @functools.cache
    def find(files: tuple[str, ...]) -> list[str]:
        out: list[str] = []
        for pin in project.pins:
            own = [f for f in files if f.split("/", 1)[0] == pin.package_root]
            if own:
                out += kept_release_importers(project.pin_tree(pin.name), own, pin.package_root)
        return sorted(dict.fromkeys(out))

    return find
