"""Where a variant's images are, without making anything: the plan `build` would follow now, with each base as
the local image store has it (nothing pulled, nothing built), and `smoke VARIANT` on it."""

from __future__ import annotations

from imgbuild.builder.bases import BaseMissing, Bases
from imgbuild.builder.options import BuildOptions
from imgbuild.engine import Engine
from imgbuild.errors import SmokeError
from imgbuild.plan.builds import BaseInfo, BuildPlan, make_build_plan
from imgbuild.plan.inputs import project_inputs
from imgbuild.platforms import Platform
from imgbuild.progress import Say, to_stderr
from imgbuild.project import Project, Selection
from imgbuild.smoke.checks import smoke
from imgbuild.smoke.expected import ImporterFinder, expected_for
from imgbuild.smoke.report import SmokeReport


def locate(
    engine: Engine, project: Project, selection: Selection, options: BuildOptions, say: Say = to_stderr
) -> BuildPlan:
    """The images `build` would make now, as the plan names them, with each base as the local image store has it:
    nothing is pulled or built (a base's site-packages may still be asked of the base, as `build` asks it). A named
    variant's base that is not in the store means no image of the current inputs is there either: a SmokeError that
    says to build it. Another variant's missing base plans apart from it (layers are shared on one base only)."""
    plans = project.plan()
    resolver = Bases(engine, project, options.base, verbose=options.verbose, say=say)
    bases: dict[tuple[str, Platform], BaseInfo] = {}
    for p in plans:
        name = p.variant.name
        for platform in selection.platforms_of(name):
            try:
                bases[(name, platform)] = resolver.find(p, platform)
            except BaseMissing as exc:
                if name in selection.names:
                    raise SmokeError(
                        f"{exc}, so no image of the current inputs is there either", hint=exc.hint
                    ) from None
                bases[(name, platform)] = BaseInfo(exc.ref, "unresolved", None, platform, "<not in the local store>")
    return make_build_plan(project_inputs(project), plans, bases, selection, repository=options.repository)


def smoke_variants(
    engine: Engine,
    project: Project,
    selection: Selection,
    options: BuildOptions,
    *,
    runtime: bool = True,
    importers: ImporterFinder | None = None,
) -> list[SmokeReport]:
    """`smoke VARIANT...`: each platform image of each variant, found where the plan says (`locate`: nothing is
    pulled or built), smoke-tested against the plan; a missing image is a SmokeError that says to build it."""
    plan = locate(engine, project, selection, options)
    missing = [ib for ib in plan.images if engine.image(ib.immutable_ref) is None]
    if missing:
        ib = missing[0]
        raise SmokeError(
            f"{ib.variant}: no image {ib.immutable_ref} for the current inputs",
            hint=f"build it first: imgbuild build {ib.variant}" + (f" --base {options.base}" if options.base else ""),
        )
    return [smoke(engine, ib.immutable_ref, expected_for(ib, importers), runtime=runtime) for ib in plan.images]
