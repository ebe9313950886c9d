"""Build variant images on a real Docker engine: plan, check, then act.

1. Plan every variant (files, layers, Dockerfiles, tags) with the pure
   functions of planner/layers/buildplan; `--dry-run` stops here.
2. Resolve each base (a local image, a pull, or the skeleton stand-in), its
   site-packages directory, and refuse base drift: every planned file must be
   the pinned release's pristine file in the base.
3. Refuse tag collisions with images imgbuild did not build, before touching
   any tag.
4. Build each needed layer once (or reuse it when its inputs digest matches),
   then each image: tag the immutable tag, smoke-test, and only then move the
   moving tags. An image whose inputs digest matches is reused without any
   docker build. On Docker 26 the layers and images to build are written
   without BuildKit and loaded in one `docker load` (layerimage, configimage).
   A failure or an interrupt puts the tags back as they were.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from imgbuild.atomic import write_json
from imgbuild.errors import ConfigError, DockerError, SmokeError, UpstreamError
from imgbuild.images import labels, ocilayout, skeleton
from imgbuild.images.docker import ConfigPart, Engine, ImageInfo, check_binfmt
from imgbuild.images.importcheck import release_importers
from imgbuild.images.inputs import project_inputs  # moved out so publish needs no docker SDK
from imgbuild.images.layerimage import LayerPart
from imgbuild.images.multiplan import MultiImage, MultiPlan, make_multi_plan, platforms_of
from imgbuild.images.plan import BaseInfo, BuildPlan, ImageBuild, ProjectInputs, make_build_plan
from imgbuild.images.smoke import Expected, SmokeReport, smoke
from imgbuild.images.smokequeue import Journal, Slot
from imgbuild.patches.variants import VariantPlan
from imgbuild.project import Project, Selection
from imgbuild.upstream.mirror import cache_dir

if TYPE_CHECKING:  # the runtime base (and packaging, for its lock) load only for `--base runtime`
    from imgbuild.images import runtime_base

SKELETON = "skeleton"
OCI_LAYOUT_DIR = "oci-layout"  # what BuildKit exported, so it sends and loads only new blobs (ocilayout.py)
RUNTIME = "runtime"  # the stand-in that can import vllm (runtime_base.py)
Say = Callable[[str], None]
ImporterFinder = Callable[[tuple[str, ...]], list[str]]  # planned files -> the release's modules importing them


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclass(frozen=True)
class BuildOptions:
    base: str | None = None  # "skeleton" or an image reference; overrides image.base
    repository: str | None = None  # overrides image.repository (e.g. for tests)
    force: bool = False
    smoke: bool = True
    verbose: bool = False
    builder: str | None = None  # a buildx builder (remote or multi-node BuildKit); default: buildx's own choice


@dataclass
class LayerResult:
    digest: str
    tag: str
    image_id: str
    files: tuple[str, ...]
    built: bool

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass
class ImageResult:
    variant: str
    platform: str
    image_id: str
    immutable: str
    moving: tuple[str, ...]
    inputs_digest: str
    built: bool
    moved: bool
    layers: tuple[str, ...]  # RootFS diff ids
    smoke: SmokeReport | None = None
    note: str = ""
    base_layers: int = 0
    index: str = ""  # the multi-platform image this platform's image is part of (Docker 26 path)
    index_ref: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "variant": self.variant,
            "platform": self.platform,
            "image_id": self.image_id,
            "immutable": self.immutable,
            "moving": list(self.moving),
            "inputs_digest": self.inputs_digest,
            "built": self.built,
            "moved": self.moved,
            "rootfs_layers": list(self.layers),
            "base_layers": self.base_layers,
            "index": self.index or None,
            "index_ref": self.index_ref or None,
            "note": self.note,
            "smoke": self.smoke.to_json() if self.smoke else None,
        }


@dataclass(frozen=True)
class DryRun:
    """What `build --dry-run` shows: the per-platform plan, whether the daemon answered (else the bases are
    unresolved and the digests provisional), and the multi-platform plan this engine would run instead."""

    plan: BuildPlan
    asked: bool
    multi: MultiPlan | None = None

    def to_json(self) -> dict[str, object]:
        return {**({"multi_platform": self.multi.to_json()} if self.multi else {}), **self.plan.to_json()}


@dataclass
class BuildResult:
    plan: BuildPlan
    layers: list[LayerResult] = field(default_factory=list)
    images: list[ImageResult] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"layers": [lr.to_json() for lr in self.layers], "images": [i.to_json() for i in self.images]}


# -- planning ---------------------------------------------------------------
def base_ref(plan: VariantPlan, options: BuildOptions) -> str:
    ref = options.base or plan.variant.image.base
    if not ref:
        raise ConfigError(
            f"images/{plan.variant.name}.yaml: image.base is not set (nor inherited through from:)",
            hint="set image.base, or pass --base REF (--base skeleton builds on the offline stand-in)",
        )
    return ref


def skeleton_spec(project: Project, site_packages: str | None, platform: str) -> skeleton.SkeletonSpec:
    """The stand-in base for `project` on `platform`, with vllm/ where the variant expects it."""
    return skeleton.SkeletonSpec(
        platform=platform,
        upstream_commit=project.pin.commit,
        package_root=project.pin.package_root,
        site_packages=site_packages or skeleton.SITE_PACKAGES,
    )


def runtime_spec(project: Project, site_packages: str | None, platform: str) -> runtime_base.RuntimeSpec:
    """The runtime base for `project` on `platform`; its lock must pin the project's vllm."""
    from imgbuild.images import runtime_base, runtime_lock

    lock = runtime_lock.load_lock(project.root, platform)
    pin = lock.pin(runtime_lock.ROOT)
    if pin is None or pin.version != project.pin.version:
        raise UpstreamError(
            f"{runtime_lock.LOCK_DIR / runtime_lock.lock_name(platform)} locks vllm "
            f"{pin.version if pin else '(none)'}, but patches/upstream.yaml pins {project.pin.version}",
            hint=f"imgbuild skeleton --runtime --relock --platform {platform}",
        )
    return runtime_base.RuntimeSpec(platform, lock, site_packages or skeleton.SITE_PACKAGES)


def dry_bases(
    project: Project, plans: Sequence[VariantPlan], options: BuildOptions, engine: Engine | None
) -> dict[tuple[str, str], BaseInfo]:
    """Bases as far as a dry run can know them (the daemon is asked if it answers)."""
    out = {}
    for plan in plans:
        for platform in plan.variant.image.platforms:
            ref = base_ref(plan, options)
            site = plan.variant.image.site_packages
            if ref in (SKELETON, RUNTIME):
                spec = (skeleton_spec if ref == SKELETON else runtime_spec)(project, site, platform)
                ref, site = spec.tag, spec.site_packages
            info = engine.image(ref) if engine else None
            site = site or (info.labels.get("imgbuild.site-packages") if info else None) or "<asked from the base>"
            image_id = info.id if info else "unresolved"
            out[(plan.variant.name, platform)] = BaseInfo(
                ref, image_id, info.registry_digest if info else None, platform, site
            )
    return out


# -- resolving bases --------------------------------------------------------
SITE_PROBE = (
    "import importlib.util as u, os, sys, sysconfig\n"
    "s = u.find_spec(sys.argv[1])\n"
    "print(os.path.dirname(list(s.submodule_search_locations)[0]) if s else sysconfig.get_paths()['purelib'])\n"
)


class Bases:
    """Resolves and caches bases for one run."""

    def __init__(self, engine: Engine, project: Project, options: BuildOptions, say: Say) -> None:
        self.engine, self.project, self.options, self.say = engine, project, options, say
        self._info: dict[tuple[str, str], ImageInfo] = {}
        self._site: dict[tuple[str, str], str] = {}

    def resolve(self, plan: VariantPlan, platform: str) -> BaseInfo:
        ref = base_ref(plan, self.options)
        skel = ref == SKELETON
        site_cfg = plan.variant.image.site_packages
        if skel:
            spec = skeleton_spec(self.project, site_cfg, platform)
            ref = spec.tag
            if (ref, platform) not in self._info:
                up = self.project.upstream
                self._info[(ref, platform)] = skeleton.ensure_skeleton(
                    self.engine, spec, up.repo, cache_dir(), verbose=self.options.verbose
                )
        elif ref == RUNTIME:
            rspec = runtime_spec(self.project, site_cfg, platform)
            ref = rspec.tag
            if (ref, platform) not in self._info:
                from imgbuild.images import runtime_base

                built = runtime_base.ensure_runtime(self.engine, rspec, cache_dir(), verbose=self.options.verbose)
                self._info[(ref, platform)] = built.info
        info = self._image(ref, platform)
        site = site_cfg or info.labels.get("imgbuild.site-packages") or self._site_packages(info, ref, platform)
        return BaseInfo(ref, info.id, info.registry_digest, platform, site, skeleton=labels.SKELETON in info.labels)

    def _image(self, ref: str, platform: str) -> ImageInfo:
        if (ref, platform) not in self._info:
            info = self.engine.image(ref)
            if info is None:
                self.say(f"base {ref} is not in the local image store; pulling it for {platform}")
                info = self.engine.pull(ref, platform)
            want = platform.split("/")[1]
            if info.arch != want:
                raise DockerError(
                    f"base {ref} in the local image store is {info.platform}, but the build is for {platform}",
                    hint="a local store holds one platform per tag: load the base for this platform, or use "
                    "--base skeleton (one stand-in per platform)",
                )
            self._info[(ref, platform)] = info
        return self._info[(ref, platform)]

    def _site_packages(self, info: ImageInfo, ref: str, platform: str) -> str:
        if (info.id, platform) not in self._site:
            check_binfmt(info.arch, self.engine.arch)
            root = self.project.pin.package_root
            res = self.engine.run(
                info.id, ["-c", SITE_PROBE, root], platform=platform, entrypoint=["python3"], timeout=300
            )
            lines = res.stdout.strip().splitlines()
            if res.exit_code != 0 or not lines or not lines[-1].startswith("/"):
                raise DockerError(
                    f"cannot find where {root}/ lives in base {ref}: python3 said "
                    f"{(res.stderr or res.stdout).strip()[-300:]!r}",
                    hint="set image.site_packages in the variant's YAML",
                )
            self._site[(info.id, platform)] = lines[-1]
            self.say(f"base {ref}: {root}/ lives in {lines[-1]}")
        return self._site[(info.id, platform)]


DRIFT_DIR = "drift-checked"  # one file per (base id, platform, site-packages, pinned hashes) that passed


def drift_key(image_id: str, platform: str, site_packages: str, wanted: dict[str, str | None]) -> str:
    """What a passed drift check depends on: the base's id, where vllm/ lives, and each planned file's pinned hash."""
    lines = ["imgbuild-drift/1", image_id, platform, site_packages]
    lines += [f"{path}\0{wanted[path] or '-'}" for path in sorted(wanted)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def check_drift(
    engine: Engine,
    plans: Sequence[VariantPlan],
    bases: dict[tuple[str, str], BaseInfo],
    cache: Path | None = None,
) -> None:
    """Refuse when a planned file in a base is not the pinned release's pristine file.

    A base that passed with the same planned files is not read again: `cache`
    (the imgbuild cache's drift-checked/) keeps one file per `drift_key`, so a
    different base id, site-packages or pinned hash checks again. An image id
    is a digest of the image, so its files cannot change under it.
    """
    problems: list[str] = []
    by_base: dict[tuple[str, str, str], dict[str, str | None]] = {}
    for plan in plans:
        for platform in plan.variant.image.platforms:
            base = bases[(plan.variant.name, platform)]
            wanted = by_base.setdefault((base.image_id, platform, base.site_packages), {})
            for f in plan.files:
                wanted[f.path] = f.pristine_sha256
    refs = {(b.image_id, b.platform, b.site_packages): b.ref for b in bases.values()}
    for (image_id, platform, site), wanted in by_base.items():
        marker = cache / DRIFT_DIR / drift_key(image_id, platform, site, wanted) if cache else None
        if marker is not None and marker.is_file():
            continue
        paths = {f"{site.rstrip('/')}/{p}": p for p in sorted(wanted)}
        found = engine.read_files(image_id, list(paths), platform)
        before = len(problems)
        for full, rel in paths.items():
            data = found[full]
            have = hashlib.sha256(data).hexdigest() if data is not None else None
            want = wanted[rel]
            if have != want:
                problems.append(
                    f"{refs[(image_id, platform, site)]}: {full}: base has {have or 'no such file'}, "
                    f"the pinned release has {want or 'no such file'}"
                )
        if marker is not None and len(problems) == before:
            with contextlib.suppress(OSError):  # a cache that cannot keep it checks again next time
                write_json(marker, {"base": image_id, "platform": platform, "site_packages": site, "files": wanted})
    if problems:
        raise UpstreamError(
            "base drift: the base does not carry the pinned release's files, so overlaying patched files on it "
            "would mix releases:\n  " + "\n  ".join(problems),
            hint="use a base built from the pinned release, or re-pin patches/upstream.yaml to the release in the "
            "base (then `imgbuild patches check`)",
        )


def check_collisions(engine: Engine, plan: BuildPlan, multi: MultiPlan | None = None) -> None:
    """Refuse before any build when a tag we would write names an image imgbuild did not build."""
    clashes = []
    wanted: list[tuple[str, str]] = []
    if multi is None:
        wanted += [(lb.tag, labels.LAYER) for lb in plan.layers]
        for ib in plan.images:
            wanted += [(ib.immutable_ref, labels.INPUTS), *((r, labels.INPUTS) for r in ib.moving_refs)]
    else:
        wanted += [(ml.tag, labels.LAYER) for ml in multi.layers]
        for mi in multi.images:
            refs = [mi.immutable_ref, *mi.platform_refs.values(), *mi.moving_refs]
            wanted += [(r, labels.INPUTS) for r in refs]
    for ref, key in wanted:
        info = engine.image(ref)
        if info is not None and key not in info.labels:
            clashes.append(f"{ref} (image {info.id[7:19]}, no {key} label)")
    if clashes:
        raise DockerError(
            "tag collision: these tags name images that imgbuild did not build, and imgbuild will not move them:\n  "
            + "\n  ".join(clashes),
            hint="remove or rename them (`docker rmi TAG` / `docker tag`), or build into another repository "
            "(image.repository, or --repository)",
        )


def multi_plan(
    engine: Engine, project: Project, plan: BuildPlan, inputs: ProjectInputs | None = None
) -> MultiPlan | None:
    """The multi-platform plan when the engine builds several platforms in one call and the plan has several."""
    if not engine.features.modern or len(platforms_of(plan)) < 2:
        return None
    return make_multi_plan(project_inputs(project) if inputs is None else inputs, plan)


def smoke_images(engine: Engine, project: Project, plan: BuildPlan) -> tuple[ImageBuild, ...]:
    """The single-platform images a smoke test of `plan` runs on (each platform of a multi-platform image)."""
    multi = multi_plan(engine, project, plan)
    return plan.images if multi is None else tuple(p for mi in multi.images for p in mi.parts)


# -- executing --------------------------------------------------------------
OnSmoke = Callable[[SmokeReport], None]


@dataclass
class _Turn:
    """An image's turn as decided before anything is written: reused, or built (its tags to put back in `slot`)."""

    unit: ImageBuild | MultiImage
    slot: Slot
    reuse: bool
    existing_id: str | None  # what the immutable tag names now
    note: str  # what its turn says first: reused, or building
    written: str | None = None  # its id, where it was written ahead with the layers


def _config_parts(parts: Sequence[ImageBuild]) -> list[ConfigPart]:
    return [ConfigPart(p.from_ref, p.platform, tuple(p.plan.variant.image.env), p.labels) for p in parts]


@dataclass(frozen=True)
class _LayerStep:
    digest: str
    tag: str
    files: tuple[str, ...]
    parts: tuple[LayerPart, ...]  # one per platform
    context: bytes = field(repr=False)  # for BuildKit, where the layer cannot be written here

    @property
    def platforms(self) -> list[str]:
        return [p.platform for p in self.parts]

    @property
    def what(self) -> str:
        return f"layer {self.tag} ({len(self.files)} file{'s' if len(self.files) != 1 else ''})"


class Runner:
    def __init__(
        self,
        engine: Engine,
        plan: BuildPlan,
        options: BuildOptions,
        say: Say,
        on_smoke: OnSmoke | None = None,
        *,
        multi: MultiPlan | None = None,
        epoch: int | None = None,
        importers: ImporterFinder | None = None,
    ) -> None:
        self.engine, self.plan, self.options, self.say = engine, plan, options, say
        self.on_smoke = on_smoke
        self.multi, self.epoch = multi, epoch
        self.importers = importers
        self.result = BuildResult(plan)
        self._layer_results: dict[str, LayerResult] = {}
        self.journal = Journal(engine, say, lambda previous: _restore(engine, previous))

    def _build(self, context: bytes, tag: str, platforms: Sequence[str], refs: dict[str, str] | None = None) -> str:
        return self.engine.build(
            context,
            tags=[tag],
            platform=",".join(platforms),
            no_cache=self.options.force,
            verbose=self.options.verbose,
            epoch=self.epoch,
            platform_tags=refs,
            builder=self.options.builder,
            layout=cache_dir() / OCI_LAYOUT_DIR,
        )

    def _writes_here(self) -> bool:
        """Whether images are written without BuildKit (Docker 26): not with a named builder, which builds all."""
        return self.epoch is not None and not self.options.builder and self.engine.features.modern

    def _config_image(self, tag: str, parts: Sequence[ImageBuild], refs: dict[str, str] | None = None) -> str | None:
        """The variant image written without BuildKit (configimage.py); None where BuildKit has to build it."""
        if not self._writes_here() or self.epoch is None:
            return None
        layout = cache_dir() / OCI_LAYOUT_DIR
        return self.engine.write_config_image(
            tag, _config_parts(parts), epoch=self.epoch, layout=layout, platform_tags=refs or {}
        )

    def _in_layout(self, image_id: str, platforms: Sequence[str]) -> bool:
        """Whether the images written on top of `image_id` find its manifest and config (else it is written again)."""
        if not self._writes_here():
            return True  # BuildKit builds what goes on top: it needs no layout
        layout = cache_dir() / OCI_LAYOUT_DIR
        return all(ocilayout.platform_image(layout, image_id, p) is not None for p in platforms)

    def _layer_steps(self) -> tuple[list[_LayerStep], list[tuple[_LayerStep, str | None]]]:
        """Every layer in plan order, and those to write: (step, the id the store has it under, for a rewrite)."""
        if self.multi is not None:
            todo = [
                _LayerStep(ml.digest, ml.tag, ml.files, tuple(ml.layer_parts()), ml.context) for ml in self.multi.layers
            ]
        else:
            todo = [_LayerStep(lb.digest, lb.tag, lb.files, (lb.part(),), lb.context) for lb in self.plan.layers]
        writes: list[tuple[_LayerStep, str | None]] = []
        for step in todo:
            existing = self.engine.image(step.tag)
            if existing is not None and existing.labels.get(labels.LAYER) == step.digest and not self.options.force:
                if self._in_layout(existing.id, step.platforms):
                    self.say(f"{step.what}: unchanged, reused (no docker build)")
                    self._layer_results[step.tag] = LayerResult(step.digest, step.tag, existing.id, step.files, False)
                else:  # the store has it, the cache's layout lost it: written again (the same bytes), so the
                    writes.append((step, existing.id))  # images on top can be written without BuildKit too
                continue
            self.say(f"{step.what}: building for {', '.join(step.platforms)}")
            writes.append((step, None))
        return todo, writes

    def _turn(self, unit: ImageBuild | MultiImage) -> _Turn:
        """What `unit`'s turn finds before anything is written: reused or built; if built, the tags to put back
        (noted now, so that a failure in the one load of every image puts them back; said in its turn)."""
        eng = self.engine
        slot = self.journal.open(unit.immutable_ref)
        refs = unit.platform_refs if isinstance(unit, MultiImage) else {}
        existing = eng.image(unit.immutable_ref)
        reuse = (
            existing is not None
            and existing.labels.get(labels.INPUTS) == unit.inputs_digest
            and all(eng.image(r) is not None for r in refs.values())
            and not self.options.force
        )
        turn = _Turn(unit, slot, reuse, existing.id if existing is not None else None, "")
        if isinstance(unit, MultiImage):
            platforms = ", ".join(unit.platforms)
            if reuse:
                turn.note = (f"{unit.variant}: {unit.immutable_ref} ({platforms}) unchanged (inputs "
                             f"{unit.inputs_digest[:12]}), reused (no docker build)")  # fmt: skip
            else:
                slot.restore = {r: _image_id(eng, r) for r in (unit.immutable_ref, *refs.values())}
                turn.note = f"{unit.variant}: building {unit.immutable_ref} for {platforms} in one call"
        elif reuse:
            turn.note = (f"{unit.variant}: {unit.immutable_ref} unchanged (inputs "
                         f"{unit.inputs_digest[:12]}), reused (no docker build)")  # fmt: skip
        else:
            slot.restore = {unit.immutable_ref: turn.existing_id}  # a failure from here on puts the immutable tag back
            turn.note = f"{unit.variant}: building {unit.immutable_ref} for {unit.platform}"
        return turn

    def _write_ahead(self, steps: Sequence[_LayerStep], writes: Sequence[tuple[_LayerStep, str | None]],
                     turns: Sequence[_Turn]) -> None:  # fmt: skip
        """The layers and images to build, written without BuildKit in one `docker load` as far as they can be;
        BuildKit then builds the layers left (the images left are built in their turn)."""
        written: dict[str, str] = {}
        if self._writes_here() and self.epoch is not None:
            variants = []
            for t in turns:
                if not t.reuse:
                    parts = t.unit.parts if isinstance(t.unit, MultiImage) else (t.unit,)
                    refs = t.unit.platform_refs if isinstance(t.unit, MultiImage) else {}
                    variants.append((t.unit.immutable_ref, _config_parts(parts), refs))
            layers = [(step.tag, step.parts) for step, _ in writes]
            written = self.engine.write_images(layers, variants, epoch=self.epoch, layout=cache_dir() / OCI_LAYOUT_DIR)
        for step, stored in writes:
            image_id = written.get(step.tag)
            if stored is not None:
                how = "written again into the cache's OCI layout" if image_id else "reused"
                self.say(f"{step.what}: unchanged, {how} (no docker build)")
                self._layer_results[step.tag] = LayerResult(
                    step.digest, step.tag, image_id or stored, step.files, False
                )
                continue
            image_id = image_id or self._build(step.context, step.tag, step.platforms)
            self._layer_results[step.tag] = LayerResult(step.digest, step.tag, image_id, step.files, True)
        self.result.layers.extend(self._layer_results[step.tag] for step in steps)
        for t in turns:
            t.written = written.get(t.unit.immutable_ref)

    def _smoke(
        self, slot: Slot, ib: ImageBuild, image_id: str, name: str, moving: Sequence[str], result: ImageResult
    ) -> None:
        """Start `ib`'s smoke test in a worker; its report is taken (shown, kept, raised on) in the slot's turn."""
        self.journal.say(slot, f"{ib.variant}: smoke-testing {ib.immutable_ref}")
        expected = expected_for(ib, self.importers)

        def taken(report: SmokeReport) -> None:
            report.image, report.name = ib.immutable_ref, name
            result.smoke = report
            if self.on_smoke is not None:
                self.on_smoke(report)
            if not report.ok:
                raise SmokeError(
                    f"{ib.immutable_ref} failed its smoke test ({len(report.failures)} failing checks: "
                    + "; ".join(f"{c.group} {c.name}: {c.detail}" for c in report.failures[:4])
                    + f"); {', '.join(moving) or 'no moving tag'} left unchanged",
                    hint=f"`imgbuild smoke {ib.variant}` for the full report; the image is kept as "
                    f"{image_id[:19]} for `imgbuild inspect`",
                )

        self.journal.submit(slot, lambda engine: smoke(engine, image_id, expected), taken)

    def image(self, turn: _Turn) -> None:
        """Build `turn`'s image now, or take it as written ahead or reused; its smoke runs in a worker, and its
        moving tags move in its turn."""
        eng = self.engine
        ib, slot = turn.unit, turn.slot
        assert isinstance(ib, ImageBuild)
        self.journal.say(slot, turn.note)
        result = ImageResult(
            ib.variant,
            ib.platform,
            "",
            ib.immutable_ref,
            ib.moving_refs,
            ib.inputs_digest,
            built=not turn.reuse,
            moved=False,
            layers=(),
        )
        if turn.reuse:
            assert turn.existing_id is not None
            result.image_id = turn.existing_id
        else:
            built = turn.written or self._config_image(ib.immutable_ref, [ib])
            result.image_id = built or self._build(ib.context, ib.immutable_ref, [ib.platform])
        pending = [r for r in ib.moving_refs if _image_id(eng, r) != result.image_id]
        smoked = False
        if not self.options.smoke:
            result.note = "not smoke-tested (--no-smoke): moving tags left alone"
            self.journal.say(slot, f"{ib.variant}: {result.note}")
        elif pending or result.built:
            name = ib.moving_refs[0] if ib.moving_refs else ib.immutable_ref
            self._smoke(slot, ib, result.image_id, name, ib.moving_refs, result)
            smoked = True
        else:
            self.journal.say(slot, f"{ib.variant}: {', '.join(ib.moving_refs) or 'no moving tag'}: already up to date")

        def finish() -> None:
            if smoked:
                for ref in pending:
                    eng.tag(result.image_id, ref)
                result.moved = bool(pending)
            slot.restore = {}
            result.layers = eng.require(result.image_id).layers
            result.base_layers = len(eng.require(ib.base.image_id).layers)
            self.result.images.append(result)

        self.journal.finish(slot, finish)

    def multi_image(self, turn: _Turn) -> None:
        """Every platform of `turn`'s image at once; each platform smoke-tested (in workers, side by side)
        before the moving tags move in its turn."""
        eng = self.engine
        mi, slot = turn.unit, turn.slot
        assert isinstance(mi, MultiImage)
        self.journal.say(slot, turn.note)
        refs = mi.platform_refs
        results = [
            ImageResult(
                p.variant,
                p.platform,
                "",
                p.immutable_ref,
                mi.moving_refs,
                mi.inputs_digest,
                built=not turn.reuse,
                moved=False,
                layers=(),
                index_ref=mi.immutable_ref,
            )
            for p in mi.parts
        ]
        if turn.reuse:
            assert turn.existing_id is not None
            index_id = turn.existing_id
        else:
            written = turn.written or self._config_image(mi.immutable_ref, mi.parts, refs)
            index_id = written or self._build(mi.context, mi.immutable_ref, mi.platforms, refs)
        for r in results:
            r.image_id, r.index = eng.require(r.immutable).id, index_id
        pending = [r for r in mi.moving_refs if _image_id(eng, r) != index_id]
        smoked = False
        if not self.options.smoke:
            for r in results:
                r.note = "not smoke-tested (--no-smoke): moving tags left alone"
            self.journal.say(slot, f"{mi.variant}: {results[0].note}")
        elif pending or not turn.reuse:
            name = mi.moving_refs[0] if mi.moving_refs else mi.immutable_ref
            for r, part in zip(results, mi.parts, strict=True):
                self._smoke(slot, part, r.image_id, f"{name} {part.platform}", mi.moving_refs, r)
            smoked = True
        else:
            self.journal.say(slot, f"{mi.variant}: {', '.join(mi.moving_refs) or 'no moving tag'}: already up to date")

        def finish() -> None:
            if smoked:
                for ref in pending:
                    eng.tag(index_id, ref)
                for r in results:
                    r.moved = bool(pending)
            slot.restore = {}
            for r, part in zip(results, mi.parts, strict=True):
                r.layers = eng.require(r.image_id).layers
                r.base_layers = len(eng.require(part.base.image_id).layers)
            self.result.images.extend(results)

        self.journal.finish(slot, finish)

    def run(self) -> BuildResult:
        """Layers first, then each image in plan order; an image's outcome is taken only after every earlier one's.

        Every image's turn is decided first (reused, or built with its tags to put back); on Docker 26 the
        layers and images to build are then written in one load. An image that fails to build lets the
        earlier ones finish first: a smoke failure of theirs is the error, as when they were smoked one
        after the other. Any failure or interrupt stops the smokes and puts back the tags of every image
        not finalised.
        """
        steps, writes = self._layer_steps()
        units: list[ImageBuild | MultiImage] = [*(self.multi.images if self.multi is not None else self.plan.images)]
        try:
            turns = [self._turn(u) for u in units]
            self._write_ahead(steps, writes, turns)
            for turn in turns:
                try:
                    if isinstance(turn.unit, MultiImage):
                        self.multi_image(turn)
                    else:
                        self.image(turn)
                except Exception:
                    self.journal.drain()  # the earlier images' turn comes first
                    raise
            self.journal.drain()
        except BaseException:
            self.journal.abort()
            raise
        self.journal.close()
        return self.result


def _restore(engine: Engine, previous: dict[str, str | None]) -> None:
    """Put tags back as they were (best effort: the daemon may be gone)."""
    for ref, image_id in previous.items():
        with contextlib.suppress(DockerError):
            if image_id is not None:
                engine.tag(image_id, ref)
            else:
                engine.untag(ref)


def sharing(images: Sequence[ImageResult]) -> dict[str, str]:
    """variant -> how its RootFS layers relate to the other images built (read back from the daemon)."""
    out = {}
    for img in images:
        own = len(img.layers) - img.base_layers
        text = f"{img.base_layers} base + {own} imgbuild layer{'s' if own != 1 else ''}"
        below = [
            o for o in images
            if o is not img and o.platform == img.platform and len(o.layers) > o.base_layers
            and len(o.layers) < len(img.layers) and img.layers[: len(o.layers)] == o.layers
        ]  # fmt: skip
        if below:
            best = max(below, key=lambda o: len(o.layers))
            text += f"; its bottom {len(best.layers)} layers are {best.variant}'s, byte for byte"
        out[f"{img.variant} {img.platform}"] = text
    return out


def _image_id(engine: Engine, ref: str) -> str | None:
    info = engine.image(ref)
    return info.id if info else None


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
        layer_digests=ib.layers,
        env=ib.plan.variant.image.env,
        importers=None if importers is None else (lambda: importers(paths)),
        layer_ref=ib.from_ref if ib.layers else None,
    )


def importer_finder(project: Project) -> ImporterFinder:
    """The release's modules that import the given planned files, scanned once per set of files."""
    found: dict[tuple[str, ...], list[str]] = {}
    lock = threading.Lock()  # smoke workers ask from their threads; gitpython's objects are not thread-safe

    def find(files: tuple[str, ...]) -> list[str]:
        with lock:
            if files not in found:
                found[files] = release_importers(project.tree(), files, project.pin.package_root)
            return found[files]

    return find


def prepare(
    engine: Engine,
    project: Project,
    selection: Selection,
    options: BuildOptions,
    say: Say = _stderr,
    inputs: ProjectInputs | None = None,
) -> tuple[BuildPlan, MultiPlan | None]:
    """Plan, resolve bases, check drift: everything before the first tag or build; the plan and, where
    the engine builds several platforms in one call, its multi-platform plan.

    By default a build makes each variant's first platform under the plain tags
    (`vllm-dsv41:latest`); `--platform all` or `a,b` (Project.select) several.
    On Docker 26 with the containerd image store they become one multi-platform
    image per tag (multiplan.py); on older engines each platform is built on its
    own under `-<arch>` tag suffixes.

    The drift check is skipped only when every wanted image already exists with
    equal inputs (the inputs name the base's image id, and it was checked then).
    `inputs`: project_inputs(project), when the caller has it (two git calls and a commit read each).
    """
    inputs = project_inputs(project) if inputs is None else inputs
    plans = project.selected_plans(selection)
    resolver = Bases(engine, project, options, say)
    bases = {(p.variant.name, pf): resolver.resolve(p, pf) for p in plans for pf in p.variant.image.platforms}
    plan = make_build_plan(inputs, plans, bases, list(selection.names), repository=options.repository)
    multi = multi_plan(engine, project, plan, inputs)
    wanted = [(ib.immutable_ref, ib.inputs_digest) for ib in plan.images] if multi is None else []
    wanted += [(mi.immutable_ref, mi.inputs_digest) for mi in (multi.images if multi else ())]
    if options.force or not all(_current(engine, ref, inputs) for ref, inputs in wanted):
        check_drift(engine, plans, bases, cache_dir())
    return plan, multi


def _current(engine: Engine, ref: str, inputs: str) -> bool:
    info = engine.image(ref)
    return info is not None and info.labels.get(labels.INPUTS) == inputs


def build(
    engine: Engine,
    project: Project,
    selection: Selection,
    options: BuildOptions,
    say: Say = _stderr,
    on_smoke: OnSmoke | None = None,
) -> BuildResult:
    say(engine.features.describe())
    inputs = project_inputs(project)
    with engine.remembering():  # one inspect per ref; every tag, load or build drops what was kept
        plan, multi = prepare(engine, project, selection, options, say, inputs)
        check_collisions(engine, plan, multi)
        epoch = labels.epoch(inputs.created)
        finder = importer_finder(project)
        return Runner(engine, plan, options, say, on_smoke, multi=multi, epoch=epoch, importers=finder).run()


def dry_run(project: Project, selection: Selection, options: BuildOptions) -> DryRun:
    """The build plan without building (and the multi-platform one the engine would run); asks the daemon
    about bases only if it answers."""
    try:
        engine: Engine | None = Engine.connect()
    except DockerError:
        engine = None
    return dry_plan(project, selection, options, engine)


def dry_plan(project: Project, selection: Selection, options: BuildOptions, engine: Engine | None) -> DryRun:
    """`dry_run` with the engine given (None: no daemon, so bases are unresolved)."""
    plans = project.selected_plans(selection)
    bases = dry_bases(project, plans, options, engine)
    names = list(selection.names)
    plan = make_build_plan(project_inputs(project), plans, bases, names, repository=options.repository)
    return DryRun(plan, engine is not None, multi_plan(engine, project, plan) if engine else None)
