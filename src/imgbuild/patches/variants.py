"""Resolve variants to patch selections (`resolve_variants`, pure), and selections to file plans (`plan_variant`:
every file a patch touches, patched or original, with its hashes; it reads the pinned tree, through git when the
tree is a commit, and writes nothing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from imgbuild.config.models import SmokeSpec, VariantConfig
from imgbuild.errors import ApplyError, ConfigError, unknown_name
from imgbuild.patches.apply import PatchOutcome, StackResult, Tree, derive_stack
from imgbuild.patches.patchfile import Patch
from imgbuild.platforms import Platform
from imgbuild.shapes import NULLABLE, named
from imgbuild.upstream.git import blob_id, sha256

DEFAULT_PLATFORMS = (Platform("linux", "arm64"),)


@dataclass(frozen=True)
class ResolvedImage:
    repository: str | None
    tags: tuple[str, ...]
    base: str | None
    platforms: tuple[Platform, ...]
    site_packages: str | None
    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    entrypoint: str | None = None  # "keep", "clear", or None: undecided (images/*.yaml image.entrypoint)


@dataclass(frozen=True)
class ResolvedVariant:
    name: str
    description: str
    chain: tuple[str, ...]  # root ancestor first, this variant last
    selected: tuple[str, ...]  # patch names, in series order
    reverted: tuple[str, ...]  # series patches this variant leaves out
    image: ResolvedImage
    smoke: SmokeSpec

    def base_ref(self, override: str | None = None, *, takes_base: bool = False) -> str:
        """The base this variant's image is built on: `override` (`--base`), else image.base; the one check that
        one is set (a ConfigError; `takes_base`: the command has `--base`, so the hint names it)."""
        ref = override or self.image.base
        if not ref:
            more = ", or pass --base REF (--base skeleton builds on the offline stand-in)" if takes_base else ""
            raise ConfigError(
                f"images/{self.name}.yaml: image.base is not set (nor inherited through from:)",
                hint=f"set image.base, e.g. vllm/vllm-openai:v0.34.0, in the root variant{more}",
            )
        return ref

    def repository(self, override: str | None = None, *, takes_repository: bool = False) -> str:
        """The repository this variant's images are named in: `override` (`--repository`), else image.repository;
        the one check that one is set (a ConfigError, as for the base; `takes_repository`: the command has
        `--repository`, so the hint names it)."""
        repo = override or self.image.repository
        if not repo:
            more = ", or pass --repository NAME" if takes_repository else ""
            raise ConfigError(
                f"images/{self.name}.yaml: image.repository is not set (nor inherited through from:)",
                hint=f"set image.repository, e.g. vllm-dsv41, in the root variant{more}",
            )
        return repo


def patch_names(patches: Sequence[Patch]) -> dict[str, list[str]]:
    """Every name a variant may use (patch name, file name, group) -> patch names."""
    names: dict[str, list[str]] = {}
    for p in patches:
        names.setdefault(p.name, []).append(p.name)
        names.setdefault(p.filename, []).append(p.name)
        if p.group:
            names.setdefault(p.group, []).append(p.name)
    return names


def _expand(variant: str, key: str, words: Sequence[str], names: Mapping[str, list[str]]) -> set[str]:
    out: set[str] = set()
    for word in words:
        if word not in names:
            raise ConfigError(
                f"images/{variant}.yaml: {key}: " + unknown_name("patch or group", word, names),
                hint="use a group name from a patch's Group: field, or a patch name from patches/series",
            )
        out.update(names[word])
    return out


def _refuse_groupless(variant: str, reverted: Sequence[str], patches: Sequence[Patch], kept: set[str]) -> None:
    """A variant that reverts a group must not keep a group-less patch that changes that group's files."""
    for group in reverted:
        files = {path for p in patches if p.group == group for path in p.paths}
        for p in patches:
            touched = sorted(files.intersection(p.paths))
            if not p.group and p.name in kept and touched:
                raise ConfigError(
                    f"images/{variant}.yaml: revert: {group}: {p.filename} has no Group: line but changes "
                    f"{', '.join(touched)}, a file of group {group!r}; {variant} would carry it patched",
                    hint=f"add `Group: {group}` to the header of patches/{p.filename} (or a group of its own)",
                )


def resolve_variants(configs: Mapping[str, VariantConfig], patches: Sequence[Patch]) -> dict[str, ResolvedVariant]:
    order = [p.name for p in patches]
    names = patch_names(patches)
    done: dict[str, ResolvedVariant] = {}

    def resolve(name: str, stack: tuple[str, ...]) -> ResolvedVariant:
        if name in done:
            return done[name]
        if name in stack:
            cycle = " -> ".join((*stack[stack.index(name) :], name))
            raise ConfigError(f"images/{name}.yaml: `from:` makes a cycle: {cycle}", hint="break the cycle")
        cfg = configs[name]
        parent: ResolvedVariant | None = None
        if cfg.from_ is not None:
            if cfg.from_ not in configs:
                raise ConfigError(f"images/{name}.yaml: from: " + unknown_name("variant", cfg.from_, configs))
            parent = resolve(cfg.from_, (*stack, name))
        if cfg.patches == "all" or (cfg.patches is None and parent is None):
            chosen = set(order)
        else:
            chosen = set(parent.selected if parent else ())
            chosen |= _expand(name, "patches", cfg.patches or [], names)
        chosen -= _expand(name, "revert", cfg.revert, names)
        _refuse_groupless(name, cfg.revert, patches, chosen)
        rv = ResolvedVariant(
            name=name,
            description=cfg.description,
            chain=(*(parent.chain if parent else ()), name),
            selected=tuple(p for p in order if p in chosen),
            reverted=tuple(p for p in order if p not in chosen),
            image=_inherit_image(cfg, parent),
            smoke=cfg.smoke if (cfg.smoke.commands or parent is None) else parent.smoke,
        )
        done[name] = rv
        return rv

    for name in configs:
        resolve(name, ())
    return {n: done[n] for n in configs}


def _inherit_image(cfg: VariantConfig, parent: ResolvedVariant | None) -> ResolvedImage:
    img = cfg.image
    up = parent.image if parent else None
    env = dict(up.env) if up else {}
    for k, v in img.env.items():
        if v is None:
            env.pop(k, None)  # `KEY: null` removes an inherited variable
        else:
            env[k] = v
    labels = {**(dict(up.labels) if up else {}), **img.labels}
    return ResolvedImage(
        repository=img.repository or (up.repository if up else None),
        tags=tuple(img.tags) if img.tags is not None else (cfg.name,),
        base=img.base or (up.base if up else None),
        platforms=tuple(img.platforms or (up.platforms if up else DEFAULT_PLATFORMS)),
        site_packages=img.site_packages or (up.site_packages if up else None),
        env=tuple(sorted(env.items())),
        labels=tuple(sorted(labels.items())),
        entrypoint=img.entrypoint or (up.entrypoint if up else None),
    )


@dataclass(frozen=True)
class PlannedFile:
    path: str
    state: Annotated[str, Field(description="patched or original")]
    patches: Annotated[tuple[str, ...], Field(description="the variant's patches that change the file")]
    groups: Annotated[tuple[str, ...], Field(description="the groups of every series patch touching the file")]
    sha256: Annotated[str, NULLABLE]
    blob: Annotated[str, NULLABLE]
    pristine_blob: str | None
    pristine_sha256: str | None


@dataclass(frozen=True)
class VariantPlan:
    variant: ResolvedVariant
    files: tuple[PlannedFile, ...]
    outcomes: tuple[PatchOutcome, ...]
    contents: Mapping[str, bytes] = field(repr=False, compare=False)

    def shown(self) -> PlannedVariant:
        """The variant's plan as `plan --json` prints it."""
        v = self.variant
        return PlannedVariant(
            v.name, list(v.chain), list(v.selected), list(v.reverted), list(self.files), list(self.outcomes)
        )


@named("VariantPlan")
@dataclass(frozen=True)
class PlannedVariant:
    variant: str
    chain: list[str]
    patches: list[str]
    reverted: list[str]
    files: list[PlannedFile]
    apply: list[PatchOutcome]


def plan_variant(
    variant: ResolvedVariant,
    patches: Sequence[Patch],
    tree: Tree,
    *,
    max_fuzz: int = 0,
) -> VariantPlan:
    """Apply the variant's patches to pristine `tree` and describe every touched file."""
    result = apply_selection(variant, patches, tree, max_fuzz=max_fuzz)
    files: list[PlannedFile] = []
    contents: dict[str, bytes] = {}
    touching_by_path: dict[str, list[Patch]] = {}
    for p in patches:
        for path in p.paths:
            touching_by_path.setdefault(path, []).append(p)
    kept = set(variant.selected)
    for path in touching_by_path:  # every path a patch touches, in series order
        pristine = tree.read(path)
        data = result.changed.get(path, pristine)
        touching = tuple(p.name for p in touching_by_path[path] if p.name in kept)
        if data is None:
            continue  # deleted by the variant, or created only by left-out patches
        changed = path in result.changed and data != pristine
        contents[path] = data
        digest, blob = sha256(data), blob_id(data)
        if pristine is None:
            pristine_digest = pristine_blob = None
        elif changed:
            pristine_digest, pristine_blob = sha256(pristine), blob_id(pristine)
        else:  # the same bytes: hashed once
            pristine_digest, pristine_blob = digest, blob
        files.append(
            PlannedFile(
                path=path,
                state="patched" if changed else "original",
                patches=touching if changed else (),
                groups=tuple(dict.fromkeys(p.group for p in touching_by_path[path])),
                sha256=digest,
                blob=blob,
                pristine_blob=pristine_blob,
                pristine_sha256=pristine_digest,
            )
        )
    return VariantPlan(variant, tuple(files), tuple(result.outcomes), contents)


def apply_selection(
    variant: ResolvedVariant,
    patches: Sequence[Patch],
    tree: Tree,
    *,
    max_fuzz: int = 0,
    full: StackResult | None = None,
) -> StackResult:
    """The variant's patches applied to `tree` without 3-way merges (derived from `full`, as in derive_stack);
    ApplyError when one does not apply on its own. `patches check` stops here, without hashing every file."""
    result = derive_stack(full, patches, variant.selected, tree, max_fuzz=max_fuzz)
    failed = [o for o in result.outcomes if not o.ok]
    if failed:
        raise _selection_error(variant, failed[0], patches)
    return result


def _selection_error(variant: ResolvedVariant, bad: PatchOutcome, patches: Sequence[Patch]) -> ApplyError:
    by_name = {p.name: p for p in patches}
    paths = set(by_name[bad.patch].paths)
    overlapping = [n for n in variant.reverted if paths & set(by_name[n].paths)]
    detail = "; ".join(f"{f.path}: {f.reason or f.method}" for f in bad.files if f.method not in ("exact", "offset"))
    if overlapping:
        return ApplyError(
            f"variant {variant.name}: kept patch {bad.patch} does not apply without the left-out "
            f"{', '.join(overlapping)} (they touch the same file: {detail})",
            hint="rebase the kept patch so it applies on its own, or leave both out; imgbuild does not guess",
        )
    return ApplyError(
        f"variant {variant.name}: patch {bad.patch} does not apply to the pinned release ({bad.method}: {detail})",
        hint="run `imgbuild patches check` for the per-hunk report, then rebase or refresh the patch",
    )
