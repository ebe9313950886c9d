"""Bases for a build: each variant and platform's base, found in the local image store (`Bases.find`) or made
(`Bases.make`: found, else pulled, or a stand-in built), where its `vllm/` lives, and the drift check that it
carries the pinned release's pristine files."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from imgbuild.atomic import write_json
from imgbuild.builder import skeleton
from imgbuild.cache import cache_dir
from imgbuild.config.models import WheelSource
from imgbuild.engine import Engine, ImageInfo, check_binfmt
from imgbuild.errors import DockerError, UpstreamError
from imgbuild.patches.variants import VariantPlan
from imgbuild.plan.builds import BaseInfo, BaseMap
from imgbuild.platforms import Platform
from imgbuild.progress import Say, to_stderr
from imgbuild.project import Project, Selection
from imgbuild.upstream.git import GitRepo

if TYPE_CHECKING:  # the runtime base (and packaging, for its lock) load only for `--base runtime`
    from imgbuild.builder import runtime_base, runtime_lock

SKELETON = "skeleton"
RUNTIME = "runtime"  # the stand-in that can import vllm (runtime_base.py)


def skeleton_spec(project: Project, site_packages: str | None, platform: Platform) -> skeleton.SkeletonSpec:
    """The stand-in base for `project` on `platform`, with vllm/ where the variant expects it."""
    return skeleton.SkeletonSpec(
        platform=platform,
        upstream_commit=project.pin.commit,
        package_root=project.pin.package_root,
        site_packages=site_packages or skeleton.SITE_PACKAGES,
        more=tuple((p.commit, p.package_root) for p in project.pins[1:]),
    )


def pin_repos(project: Project) -> list[GitRepo]:
    """The mirror of each pin, in the pins' order (what `skeleton_spec` names)."""
    return [project.resolved(p.name).repo for p in project.pins]


def runtime_spec(project: Project, site_packages: str | None, platform: Platform) -> runtime_base.RuntimeSpec:
    """The runtime base for `project` on `platform`; its lock must pin the project's vllm."""
    from imgbuild.builder import runtime_base, runtime_lock

    lock = runtime_lock.load_lock(project.root, platform)
    problems = runtime_lock_problems(project, lock)
    if problems:
        raise UpstreamError(problems[0], hint=f"imgbuild skeleton --runtime --relock --platform {platform}")
    return runtime_base.RuntimeSpec(lock.platform, lock, site_packages or skeleton.SITE_PACKAGES)


def runtime_lock_problems(project: Project, lock: runtime_lock.RuntimeLock) -> list[str]:
    """Each pin the runtime lock does not hold at its pinned release: vllm, and each further pin's wheel."""
    from imgbuild.builder import runtime_lock

    wanted = [(runtime_lock.ROOT, project.pin.version)]  # and each further pin's wheel, at its pinned release
    wanted += [(p.source.project, p.source.version) for p in project.pins[1:] if isinstance(p.source, WheelSource)]
    out = []
    for name, version in wanted:
        locked = lock.pin(name)
        if locked is None or locked.version != version:
            out.append(
                f"{runtime_lock.LOCK_DIR / runtime_lock.lock_name(lock.platform)} locks {name} "
                f"{locked.version if locked else '(none)'}, but patches/upstream.yaml pins {version}"
            )
    return out


StandInSpec: TypeAlias = "skeleton.SkeletonSpec | runtime_base.RuntimeSpec"  # what STAND_INS make


STAND_INS: dict[str, Callable[[Project, str | None, Platform], StandInSpec]] = {
    SKELETON: skeleton_spec,
    RUNTIME: runtime_spec,
}


def dry_bases(
    project: Project, plans: Sequence[VariantPlan], selection: Selection, base: str | None, engine: Engine | None
) -> dict[tuple[str, Platform], BaseInfo]:
    """Bases as far as a dry run can know them (the daemon is asked if it answers)."""
    out = {}
    for plan in plans:
        for platform in selection.platforms_of(plan.variant.name):
            want = wanted(project, plan, platform, base)
            info = engine.image(want.ref) if engine else None
            site = want.site_packages or (want.stand_in.site_packages if want.stand_in else None)
            site = site or (info.labels.get("imgbuild.site-packages") if info else None) or "<asked from the base>"
            image_id = info.id if info else "unresolved"
            digest = info.registry_digest if info and not want.stand_in else None  # a stand-in: no registry origin
            out[(plan.variant.name, platform)] = BaseInfo(
                want.ref, image_id, digest, platform, site, local=bool(want.stand_in)
            )
    return out


# -- resolving bases --------------------------------------------------------
SITE_PROBE = (
    "import importlib.util as u, os, sys, sysconfig\n"
    "s = u.find_spec(sys.argv[1])\n"
    "print(os.path.dirname(list(s.submodule_search_locations)[0]) if s else sysconfig.get_paths()['purelib'])\n"
)


@dataclasses.dataclass(frozen=True)
class Wanted:
    """The base a variant asks for on one platform, before the image store is asked: the tag looked for (a
    stand-in's own tag), its spec when imgbuild builds it (no registry origin, so no registry digest), and
    image.site_packages when the variant sets it."""

    ref: str
    site_packages: str | None
    stand_in: StandInSpec | None = None


def wanted(project: Project, plan: VariantPlan, platform: Platform, base: str | None) -> Wanted:
    """The one decision of which base `plan` is built on for `platform` (`base`: `--base`); a stand-in's spec (the
    runtime base reads its lock) names the tag it is built under."""
    ref = plan.variant.base_ref(base, takes_base=True)
    site = plan.variant.image.site_packages
    if ref not in STAND_INS:
        return Wanted(ref, site)
    spec = STAND_INS[ref](project, site, platform)
    return Wanted(spec.tag, site, spec)


class BaseMissing(Exception):
    """`Bases.find` did not find a variant's base in the local image store (it neither pulls nor builds one): the
    reference looked for, and the command that makes it (`hint`)."""

    def __init__(self, ref: str, variant: str, base: str | None) -> None:
        super().__init__(f"{variant}: its base {ref} is not in the local image store")
        self.ref, self.variant = ref, variant
        self.hint = f"build it first: imgbuild build {variant}" + (f" --base {base}" if base else "")


class Bases:
    """Each variant and platform's base, resolved once per run through one of two entry points: `find` (the local
    image store only: nothing pulled, nothing built; a missing base is BaseMissing) for what asks where an image is
    (`smoke VARIANT`), and `make` (found, else pulled, or the stand-in built) for what makes images (`build`,
    `publish`). Either may ask a base's python3 where its package lives when neither the variant nor the base's
    label says it."""

    def __init__(
        self, engine: Engine, project: Project, base: str | None, *, verbose: bool = False, say: Say = to_stderr
    ) -> None:
        self.engine, self.project, self.base, self.verbose, self.say = engine, project, base, verbose, say
        self._wanted: dict[tuple[str, str | None, Platform], Wanted] = {}
        self._info: dict[tuple[str, Platform], ImageInfo] = {}
        self._site: dict[tuple[str, Platform], str] = {}
        self._made: set[tuple[str, Platform]] = set()  # stand-ins `make` ensured (their label says their spec)

    def find(self, plan: VariantPlan, platform: Platform) -> BaseInfo:
        """`plan`'s base for `platform` as the local image store has it; BaseMissing names it and what makes it."""
        want = self.wanted(plan, platform)
        info = self._found(want, platform)
        if info is None:
            raise BaseMissing(want.ref, plan.variant.name, self.base)
        return self._base_info(want, info, platform)

    def make(self, plan: VariantPlan, platform: Platform) -> BaseInfo:
        """`plan`'s base for `platform`: found in the local image store, else pulled, or the stand-in built."""
        want = self.wanted(plan, platform)
        key = (want.ref, platform)
        if want.stand_in is not None and key not in self._made:  # ensure_*: kept when its label says its spec
            self._info[key] = self._build(want.stand_in)
            self._made.add(key)
        elif want.stand_in is None and self._found(want, platform) is None:
            self.say(f"base {want.ref} is not in the local image store; pulling it for {platform}")
            self._info[key] = self._checked(want.ref, self.engine.pull(want.ref, platform), platform)
        return self._base_info(want, self._info[key], platform)

    def wanted(self, plan: VariantPlan, platform: Platform) -> Wanted:
        """`wanted`, once per base, site-packages and platform (the runtime lock is read once)."""
        key = (plan.variant.base_ref(self.base, takes_base=True), plan.variant.image.site_packages, platform)
        if key not in self._wanted:
            self._wanted[key] = wanted(self.project, plan, platform, self.base)
        return self._wanted[key]

    def _found(self, want: Wanted, platform: Platform) -> ImageInfo | None:
        """The store's image under `want.ref`, kept for the run; a registry base of another platform is refused."""
        if (want.ref, platform) not in self._info:
            info = self.engine.image(want.ref)
            if info is None:
                return None
            # a stand-in's tag names its platform; a registry base's tag holds one platform in a local store
            self._info[(want.ref, platform)] = info if want.stand_in else self._checked(want.ref, info, platform)
        return self._info[(want.ref, platform)]

    @staticmethod
    def _checked(ref: str, info: ImageInfo, platform: Platform) -> ImageInfo:
        if info.platform != platform:
            raise DockerError(
                f"base {ref} in the local image store is {info.platform}, but the build is for {platform}",
                hint="a local store holds one platform per tag: load the base for this platform, or use "
                "--base skeleton (one stand-in per platform)",
            )
        return info

    def _build(self, spec: StandInSpec) -> ImageInfo:
        if isinstance(spec, skeleton.SkeletonSpec):
            repos = pin_repos(self.project)
            return skeleton.ensure_skeleton(self.engine, spec, repos, cache_dir(), verbose=self.verbose)
        from imgbuild.builder import runtime_base

        return runtime_base.ensure_runtime(self.engine, spec, cache_dir(), verbose=self.verbose).info

    def _base_info(self, want: Wanted, info: ImageInfo, platform: Platform) -> BaseInfo:
        site = want.site_packages or info.labels.get("imgbuild.site-packages") or self._site_packages(info, want.ref)
        digest = None if want.stand_in else info.registry_digest  # built here: no registry origin
        return BaseInfo(want.ref, info.id, digest, platform, site, local=want.stand_in is not None)

    def _site_packages(self, info: ImageInfo, ref: str) -> str:
        if (info.id, info.platform) not in self._site:
            check_binfmt(info.platform, self.engine.platform)
            root = self.project.pin.package_root
            res = self.engine.run(
                info.id, ["-c", SITE_PROBE, root], platform=info.platform, entrypoint=["python3"], timeout=300
            )
            lines = res.stdout.strip().splitlines()
            if res.exit_code != 0 or not lines or not lines[-1].startswith("/"):
                raise DockerError(
                    f"cannot find where {root}/ lives in base {ref}: python3 said "
                    f"{(res.stderr or res.stdout).strip()[-300:]!r}",
                    hint="set image.site_packages in the variant's YAML",
                )
            self._site[(info.id, info.platform)] = lines[-1]
            self.say(f"base {ref}: {root}/ lives in {lines[-1]}")
        return self._site[(info.id, info.platform)]


DRIFT_DIR = "drift-checked"  # one file per (base id, platform, site-packages, pinned hashes) that passed


def drift_key(image_id: str, platform: Platform, site_packages: str, wanted: dict[str, str | None]) -> str:
    """What a passed drift check depends on: the base's id, where vllm/ lives, and each planned file's pinned hash."""
    lines = ["imgbuild-drift/1", image_id, str(platform), site_packages]
    lines += [f"{path}\0{wanted[path] or '-'}" for path in sorted(wanted)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def check_drift(
    engine: Engine, plans: Sequence[VariantPlan], bases: BaseMap, cache: Path, project: Project | None = None
) -> None:
    """Refuse when a planned file in a base is not the pinned release's pristine file. A pass is kept in
    `cache`/drift-checked/ under its `drift_key` (an image id is a digest: its files cannot change). When a
    package's files are all missing, the error says whether the base has that package elsewhere (another
    python's site- or dist-packages: what to set) or not at all (what the stack needs of it)."""
    by_name = {p.variant.name: p for p in plans}
    by_base: dict[tuple[str, Platform, str], dict[str, str | None]] = {}
    users: dict[tuple[str, Platform, str], list[str]] = {}
    for (name, platform), base in bases.items():
        key = (base.image_id, platform, base.site_packages)
        wanted = by_base.setdefault(key, {})
        wanted.update({f.path: f.pristine_sha256 for f in by_name[name].files})
        users.setdefault(key, []).append(name)
    refs = {(b.image_id, b.platform, b.site_packages): b.ref for b in bases.values()}
    problems: list[str] = []
    findings: list[Finding] = []
    for (image_id, platform, site), wanted in by_base.items():
        marker = cache / DRIFT_DIR / drift_key(image_id, platform, site, wanted)
        if marker.is_file():
            continue
        paths = {f"{site.rstrip('/')}/{p}": p for p in sorted(wanted)}
        have = engine.file_digests(image_id, list(paths), platform)
        ref = refs[(image_id, platform, site)]
        bad = [
            f"{ref}: {full}: base has {have[full] or 'no such file'}, "
            f"the pinned release has {wanted[rel] or 'no such file'}"
            for full, rel in paths.items()
            if have[full] != wanted[rel]
        ]
        problems += bad
        if bad:
            absent = {rel for full, rel in paths.items() if have[full] is None and wanted[rel] is not None}
            found = find_misplaced(engine, image_id, platform, ref, site, wanted, absent)
            findings += [dataclasses.replace(f, variants=tuple(users[(image_id, platform, site)])) for f in found]
        else:
            with contextlib.suppress(OSError):  # a cache that cannot keep it checks again next time
                write_json(
                    marker, {"base": image_id, "platform": str(platform), "site_packages": site, "files": wanted}
                )
    if problems:
        hint = "use a base built from the pinned release, or re-pin patches/upstream.yaml to the release in the base "
        hint += "(then `imgbuild patches check`)"
        if findings:
            said = [f.say(plans, project) for f in findings]
            raise UpstreamError(
                "base drift: " + "\n".join(s for s, _ in said) + "\nthe files it checked:\n  " + "\n  ".join(problems),
                hint="; ".join(dict.fromkeys(h for _, h in said)),
            )
        raise UpstreamError(
            "base drift: the base does not carry the pinned release's files, so overlaying patched files on it "
            "would mix releases:\n  " + "\n  ".join(problems),
            hint=hint,
        )


# Where else a Python package may live in a base: each python3.X's dist- and site-packages under the usual prefixes.
PY_PREFIXES = ("/usr/local/lib", "/usr/lib", "/opt/conda/lib", "/opt/venv/lib", "/venv/lib", "/root/.local/lib")
PY_DIRS = tuple(
    f"{prefix}/python3.{minor}/{kind}"
    for prefix in PY_PREFIXES
    for minor in range(8, 16)
    for kind in ("dist-packages", "site-packages")
)


@dataclasses.dataclass(frozen=True)
class Finding:
    """A package whose every planned file is missing from a base's site-packages: found elsewhere, or nowhere."""

    ref: str
    site: str
    root: str  # the package root: vllm, flashinfer
    found: tuple[tuple[str, bool], ...]  # (directory holding root/, whether its planned files are the pinned ones)
    variants: tuple[str, ...] = ()  # the variants built on this base

    def say(self, plans: Sequence[VariantPlan], project: Project | None) -> tuple[str, str]:
        """The sentence and the hint."""
        names = list(self.variants) or [p.variant.name for p in plans]
        where = _site_source(project, names)
        if self.found:
            dirs = ", ".join(f"{d} ({'the pinned files' if same else 'other files'})" for d, same in self.found)
            first = self.found[0][0]
            return (
                f"base {self.ref} has no {self.root}/ in {self.site} (the site-packages {where}); "
                f"it has {self.root}/ in {dirs}",
                f"set `site_packages: {first}` under `image:` in {_site_file(project, names) or 'the variant'}, or "
                f"`site_packages: null` to ask the base's python3 (right only if that python imports {self.root} "
                f"from there)",
            )
        pin = next((p for p in project.pins if p.package_root == self.root), None) if project else None
        mine = [p for p in plans if p.variant.name in names]
        patched = sorted({n for p in mine for f in p.files if f.path.startswith(f"{self.root}/") for n in f.patches})
        what = f"the pin {pin.name} {pin.tag} in patches/upstream.yaml" if pin else f"the pinned {self.root}"
        wheel = pin.source.project if pin is not None and isinstance(pin.source, WheelSource) else self.root
        return (
            f"base {self.ref} has no {self.root} package at all: none of the stack's {self.root}/ files in "
            f"{self.site}, and no {self.root}/ in any python3.X dist- or site-packages; the stack pins it "
            f"({what}) and "
            + (f"patches it ({', '.join(patched)})" if patched else "overlays its files (at upstream content here)"),
            f"use a base with {wheel}=={pin.version if pin else '<the pinned version>'} installed (`--base runtime` "
            f"builds one from images/runtime-lock), or drop the {self.root} pin and its patches from the stack: "
            f"reverting a patch in a variant is not enough, every file a series patch touches is overlaid, "
            f"reverted ones at upstream content",
        )


def _site_source(project: Project | None, names: Sequence[str]) -> str:
    where = _site_file(project, names)
    return f"image.site_packages in {where}" if where else "the base's python3 reported"


def _site_file(project: Project | None, names: Sequence[str]) -> str | None:
    """The images/ file that sets image.site_packages for these variants (following `from:`), or None."""
    if project is None:
        return None
    for name in names:
        seen: set[str] = set()
        while name in project.variant_configs and name not in seen:
            seen.add(name)
            cfg = project.variant_configs[name]
            if cfg.image.site_packages:
                return f"images/{name}.yaml"
            name = cfg.from_ or ""
    return None


def find_misplaced(
    engine: Engine,
    image_id: str,
    platform: Platform,
    ref: str,
    site: str,
    wanted: dict[str, str | None],
    absent: set[str],
) -> list[Finding]:
    """For each package root whose every planned (non-new) file is `absent` from `site`: the python directories of
    the base that hold its first file, and whether each holds the pinned files. No container is started."""
    by_root: dict[str, list[str]] = {}
    for rel in sorted(wanted):
        if wanted[rel] is not None:
            by_root.setdefault(rel.split("/", 1)[0], []).append(rel)
    roots = [root for root, rels in by_root.items() if all(r in absent for r in rels)]
    out = []
    for root in roots:
        rels = by_root[root]
        dirs = [d for d in PY_DIRS if d != site.rstrip("/")]
        have = engine.file_digests(image_id, [f"{d}/{rels[0]}" for d in dirs], platform)
        found = [d for d in dirs if have[f"{d}/{rels[0]}"] is not None]
        checked = []
        for d in found:
            digests = engine.file_digests(image_id, [f"{d}/{r}" for r in rels], platform)
            checked.append((d, all(digests[f"{d}/{r}"] == wanted[r] for r in rels)))
        checked.sort(key=lambda c: not c[1])  # the pinned files first
        out.append(Finding(ref, site, root, tuple(checked)))
    return out
