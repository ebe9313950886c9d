"""Build variant images: plan, resolve bases and check drift, refuse tag collisions, build (two at a
time; an image whose inputs digest matches is reused with no build: the engine is only read), then in plan order
smoke-test each and move its moving tags, then join each multi-platform variant. A failure puts the tags back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from imgbuild.builder import base_probe
from imgbuild.builder.bases import Bases, check_drift, dry_bases
from imgbuild.builder.options import BuildOptions
from imgbuild.builder.packages import check_packages
from imgbuild.builder.result import BuildResult, ImageBuilt, OnSmoke, reused, up_to_date
from imgbuild.cache import cache_dir
from imgbuild.engine import Engine
from imgbuild.errors import DockerError, SmokeError
from imgbuild.patches.variants import VariantPlan
from imgbuild.plan import labels
from imgbuild.plan.builds import BaseMap, BuildPlan, ImageBuild, JoinBuild, make_build_plan
from imgbuild.plan.inputs import project_inputs
from imgbuild.plan.labels import ProjectInputs
from imgbuild.platforms import Platform
from imgbuild.progress import Say, to_stderr
from imgbuild.project import Project, Selection
from imgbuild.shapes import dump
from imgbuild.smoke import launchcheck
from imgbuild.smoke.checks import smoke
from imgbuild.smoke.expected import ImporterFinder, expected_for, importer_finder

BUILDS_AT_ONCE = 2


@dataclass(frozen=True)
class DryRun:
    plan: BuildPlan
    asked: bool  # the daemon answered; else the bases are unresolved and the digests provisional


def check_collisions(engine: Engine, plan: BuildPlan) -> None:
    """Refuse before any build when a tag we would write names an image imgbuild did not build."""
    clashes = []
    for t in (*plan.images, *plan.joins):
        for ref in (t.immutable_ref, *t.moving_refs):
            info = engine.image(ref)
            if info is not None and labels.INPUTS not in info.labels:
                clashes.append(f"{ref} (image {info.id[7:19]}, no {labels.INPUTS} label)")
    if clashes:
        raise DockerError(
            "tag collision: these tags name images that imgbuild did not build, and imgbuild will not move them:\n  "
            + "\n  ".join(clashes),
            hint="remove or rename them (`docker rmi TAG` / `docker tag`), or build into another repository "
            "(image.repository, or --repository)",
        )


# -- executing --------------------------------------------------------------


class Runner:
    """Builds, smoke tests, tags and joins a plan. Every tag is noted before it is written; a failure or an
    interrupt puts back those of every image not done yet (an image done before the failure keeps its tags)."""

    def __init__(
        self,
        engine: Engine,
        plan: BuildPlan,
        options: BuildOptions,
        say: Say,
        on_smoke: OnSmoke | None = None,
        *,
        epoch: int,  # SOURCE_DATE_EPOCH of an image whose labels carry no `created` of its own
        importers: ImporterFinder | None = None,
    ) -> None:
        self.engine, self.plan, self.options, self.say = engine, plan, options, say
        self.on_smoke, self.epoch, self.importers = on_smoke, epoch, importers
        self.result = BuildResult()
        self._previous: dict[str, str | None] = {}  # tag -> what it named before this run wrote it
        self._passed: set[str] = set()  # immutable refs whose smoke passed (or was not asked for)

    def _epoch(self, ib: ImageBuild) -> int:
        """The image's SOURCE_DATE_EPOCH: its own `created` (the patches it applies), so that an edit of a patch it
        leaves out makes no new image of it."""
        created = ib.labels.get(f"{labels.OCI}created")
        return labels.epoch(created) if created else self.epoch

    def _build(self, context: bytes, tag: str, platforms: Sequence[Platform], epoch: int) -> str:
        self._note(tag)
        return self.engine.build(
            context,
            tags=[tag],
            platforms=list(platforms),
            epoch=epoch,
            no_cache=self.options.force,
            verbose=self.options.verbose,
            builder=self.options.builder,
        )

    def _note(self, ref: str) -> None:
        if ref not in self._previous:
            self._previous[ref] = _image_id(self.engine, ref)

    def _move(self, image_id: str, refs: Sequence[str]) -> bool:
        """Point each moving ref at `image_id`; one that named another image (an earlier build, or the one a
        `rollback` put it on) is said, from what to what."""
        pending = [(r, _image_id(self.engine, r)) for r in refs]
        pending = [(r, old) for r, old in pending if old != image_id]
        for ref, old in pending:
            self._note(ref)
            self.engine.tag(image_id, ref)
            if old is not None:
                self.say(f"{ref}: moved from {old[7:19]} to {image_id[7:19]} (`imgbuild rollback --to` moves it back)")
        return bool(pending)

    def make(self) -> dict[str, tuple[str, bool]]:
        """Every image of the plan, built (BUILDS_AT_ONCE at a time) or reused: immutable ref -> (id, built)."""
        made: dict[str, tuple[str, bool]] = {}
        todo = []
        for ib in self.plan.images:
            image_id = None if self.options.force else _current(self.engine, ib.immutable_ref, ib.inputs_digest)
            if image_id is None:
                self.say(f"{ib.variant}: building {ib.immutable_ref} for {ib.platform}")
                self._note(ib.immutable_ref)
                todo.append(ib)
            else:
                self.say(reused(ib.variant, ib.immutable_ref, ib.inputs_digest))
                made[ib.immutable_ref] = (image_id, False)
        with ThreadPoolExecutor(1 if self.options.verbose else BUILDS_AT_ONCE) as pool:  # --verbose: one log at a time
            ids = list(
                pool.map(lambda ib: self._build(ib.context, ib.immutable_ref, [ib.platform], self._epoch(ib)), todo)
            )
        made.update({ib.immutable_ref: (image_id, True) for ib, image_id in zip(todo, ids, strict=True)})
        return made

    def image(self, ib: ImageBuild, join: JoinBuild | None, image_id: str, built: bool) -> ImageBuilt:
        eng = self.engine
        moving = join.moving_refs if join else ib.moving_refs
        result = ImageBuilt(ib.variant, ib.platform, image_id, ib.immutable_ref, moving, ib.inputs_digest,
                             built=built, moved=False, layers=eng.require(image_id).layers,
                             base_layers=len(eng.require(ib.base.image_id).layers),
                             index_ref=join.immutable_ref if join else "")  # fmt: skip
        target = _image_id(eng, join.immutable_ref) if join else image_id  # what the moving tags should name
        stale = built or target is None or any(_image_id(eng, r) != target for r in moving)
        if not self.options.smoke:
            result.note = "not smoke-tested (--no-smoke): moving tags left alone"
            self.say(f"{ib.variant}: {result.note}")
        elif stale:
            self._smoke(ib, image_id, (moving[0] if moving else ib.immutable_ref), moving, result)
            self._passed.add(ib.immutable_ref)
            result.moved = self._move(image_id, ib.moving_refs)
        else:
            self.say(up_to_date(ib.variant, ib.platform, moving, join.immutable_ref if join else ""))
        if join is None:  # done: a later failure leaves its tags as they are now
            for ref in (ib.immutable_ref, *ib.moving_refs):
                self._previous.pop(ref, None)
        self.result.images.append(result)
        return result

    def _smoke(self, ib: ImageBuild, image_id: str, name: str, moving: Sequence[str], result: ImageBuilt) -> None:
        self.say(f"{ib.variant}: smoke-testing {ib.immutable_ref}")
        report = smoke(self.engine, image_id, expected_for(ib, self.importers))
        report = replace(report, image=ib.immutable_ref, name=name)
        result.smoke = report
        if self.on_smoke is not None:
            self.on_smoke(report)
        if not report.ok:
            flags = {"--base": self.options.base, "--repository": self.options.repository, "--platform": ib.platform}
            same = " ".join([ib.variant, *(f"{flag} {value}" for flag, value in flags.items() if value)])
            raise SmokeError(
                f"{ib.immutable_ref} failed its smoke test ({len(report.failures)} failing checks: "
                + "; ".join(f"{c.group} {c.name}: {c.detail}" for c in report.failures[:4])
                + f"); {', '.join(moving) or 'no moving tag'} left unchanged",
                hint=f"the tags this run wrote are taken back, so an image it built is gone: `imgbuild build {same} "
                f"--no-smoke` keeps it as {ib.immutable_ref}, then `imgbuild smoke {same}` reports every check",
                details={"smoke": dump(report)},
            )

    def join(self, join: JoinBuild, results: Sequence[ImageBuilt]) -> None:
        """The variant's multi-platform image over its platforms' images; moving tags only when each passed."""
        platforms = [p.platform for p in join.parts]
        index_id = None if self.options.force else _image_id(self.engine, join.immutable_ref)
        if index_id is None:
            self.say(f"{join.variant}: joining {', '.join(map(str, platforms))} as {join.immutable_ref}")
            index_id = self._build(join.context, join.immutable_ref, platforms, self._epoch(join.parts[0]))
        smoked = self.options.smoke and all(p.immutable_ref in self._passed for p in join.parts)
        moved = self._move(index_id, join.moving_refs) if smoked else False
        for r in results:
            r.index, r.moved = index_id, moved
        for ref in (join.immutable_ref, *join.moving_refs, *(p.immutable_ref for p in join.parts)):
            self._previous.pop(ref, None)

    def run(self) -> BuildResult:
        try:
            joins = {j.variant: j for j in self.plan.joins}
            made = self.make()
            done: dict[str, list[ImageBuilt]] = {}
            for ib in self.plan.images:
                done.setdefault(ib.variant, []).append(self.image(ib, joins.get(ib.variant), *made[ib.immutable_ref]))
            for join in self.plan.joins:
                self.join(join, done[join.variant])
        except BaseException:
            self._restore()
            raise
        return self.result

    def _restore(self) -> None:
        """Put every tag this run wrote back as it was; say any that could not be (the daemon may be gone)."""
        for ref, image_id in self._previous.items():
            try:
                if image_id is None:
                    self.engine.untag(ref)
                elif _image_id(self.engine, ref) != image_id:
                    self.engine.tag(image_id, ref)
            except DockerError as exc:
                fix = f"docker tag {image_id} {ref}" if image_id else f"docker image rm --no-prune {ref}"
                self.say(f"could not put {ref} back to {image_id or 'nothing'}: {exc.message}; to do it: {fix}")


def _image_id(engine: Engine, ref: str) -> str | None:
    info = engine.image(ref)
    return info.id if info else None


def prepare(
    engine: Engine,
    project: Project,
    selection: Selection,
    options: BuildOptions,
    say: Say = to_stderr,
    inputs: ProjectInputs | None = None,
) -> BuildPlan:
    """Plan, resolve bases, check entrypoints and drift: everything before the first tag or build. The checks
    are skipped when every image exists with equal inputs (which name the base's id, checked then)."""
    inputs = project_inputs(project) if inputs is None else inputs
    plans = project.plan()
    resolver = Bases(engine, project, options.base, verbose=options.verbose, say=say)
    bases = {(p.variant.name, pf): resolver.make(p, pf) for p in plans for pf in selection.platforms_of(p.variant.name)}
    plan = make_build_plan(inputs, plans, bases, selection, repository=options.repository)
    if options.force or not all(_current(engine, ib.immutable_ref, ib.inputs_digest) for ib in plan.images):
        check_entrypoints(engine, plans, bases)
        facts = base_probe.read_for_build(engine, plans, bases, cache_dir())  # one container per new base
        check_packages(project.pins, bases, facts)
        check_drift(engine, plans, bases, cache_dir(), project)
        bytecode = {k: f.bytecode for k, f in facts.items()}
        plan = make_build_plan(inputs, plans, bases, selection, repository=options.repository, bytecode=bytecode)
    return plan


def check_entrypoints(engine: Engine, plans: Sequence[VariantPlan], bases: BaseMap) -> None:
    """Before any build: each base's ENTRYPOINT against its variant's image.entrypoint (launchcheck): a
    passthrough wrapper nobody decided about, or `keep` of a consuming one, is refused (one probe per base)."""
    kinds: dict[str, str] = {}
    by_name = {p.variant.name: p for p in plans}
    for (name, platform), base in bases.items():
        decision = by_name[name].variant.image.entrypoint
        if decision == "clear":
            continue
        info = engine.require(base.image_id)
        if base.image_id not in kinds:
            kinds[base.image_id] = launchcheck.probe_base(engine, info, platform)
        launchcheck.check_decision(name, base.ref, info.entrypoint, kinds[base.image_id], decision)


def _current(engine: Engine, ref: str, inputs: str) -> str | None:
    """The id under `ref` when its `imgbuild.inputs` label is `inputs` (so it needs no build)."""
    info = engine.image(ref)
    return info.id if info is not None and info.labels.get(labels.INPUTS) == inputs else None


def build(
    engine: Engine,
    project: Project,
    selection: Selection,
    options: BuildOptions,
    say: Say = to_stderr,
    on_smoke: OnSmoke | None = None,
    done: Callable[[BuildPlan, BuildResult], None] | None = None,
) -> BuildResult:
    """Build the selection; `done` is told the plan and the result once every image is tagged (a receipt is kept
    of them: builder/receipt.py)."""
    inputs = project_inputs(project)
    with engine.reads_kept():  # each image asked about once between this run's writes
        plan = prepare(engine, project, selection, options, say, inputs)
        check_collisions(engine, plan)
        finder = importer_finder(project)
        runner = Runner(engine, plan, options, say, on_smoke, epoch=labels.epoch(inputs.created), importers=finder)
        result = runner.run()
    if done is not None:
        done(plan, result)
    return result


def dry_run(project: Project, selection: Selection, options: BuildOptions) -> DryRun:
    """The build plan without building; asks the daemon about bases only if it answers."""
    try:
        engine: Engine | None = Engine.connect()
    except DockerError:
        engine = None
    return dry_plan(project, selection, options, engine)


def dry_plan(project: Project, selection: Selection, options: BuildOptions, engine: Engine | None) -> DryRun:
    plans = project.plan()
    bases = dry_bases(project, plans, selection, options.base, engine)
    plan = make_build_plan(project_inputs(project), plans, bases, selection, repository=options.repository)
    return DryRun(plan, engine is not None)
