"""A project on disk: the pins, the series, the patches and the variants."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from imgbuild import platforms
from imgbuild.config.models import (
    UpstreamPin,
    VariantConfig,
    WheelSource,
    load_pins,
    load_variant,
)
from imgbuild.errors import ConfigError, PatchError, UsageError, unknown_name
from imgbuild.patches.patchfile import Patch, missing_fields, parse_patch, refused_fields
from imgbuild.patches.series import SeriesEntry, parse_series
from imgbuild.patches.variants import ResolvedVariant, VariantPlan, plan_variant, resolve_variants
from imgbuild.platforms import Platform
from imgbuild.root import find_root
from imgbuild.upstream.git import CommitTree, merge_file
from imgbuild.upstream.mirror import Mirror, Resolved, open_pinned
from imgbuild.upstream.requires import Need, needs, problems


def merge3(ours: bytes, base: bytes, theirs: bytes) -> tuple[bytes, int]:
    return merge_file(ours, base, theirs, ("upstream", "original", "patch"))


ALL_PLATFORMS = platforms.ALL


@dataclass(frozen=True)
class ListedPatch:
    patch: str
    group: str | None
    upstream: Annotated[
        str, Field(description="The pin the patch applies to (DEP-3 `Upstream:`, default the first pin).")
    ]
    paths: list[str]
    fields: Annotated[dict[str, str], Field(description="its DEP-3 header fields")]


@dataclass(frozen=True)
class SeriesListing:
    """The series in order, as `patches list` shows it (`Project.listing`)."""

    patches: list[ListedPatch]


@dataclass(frozen=True)
class Selection:
    """What a command asked for (`Project.select`): the named variants, and the platforms of every variant in this
    run (not only the named ones: layers are planned over all of them)."""

    names: tuple[str, ...]
    platforms: tuple[tuple[str, tuple[Platform, ...]], ...]  # (variant, its platforms), in the project's order

    def platforms_of(self, variant: str) -> tuple[Platform, ...]:
        return dict(self.platforms)[variant]


class PinnedTrees:
    """The pinned releases of several upstreams as one tree: each path is read from the release whose package root
    is its first component, so paths are site-packages-relative whatever upstream they belong to."""

    def __init__(self, trees: Mapping[str, CommitTree]) -> None:
        self.trees = dict(trees)  # package root -> its release

    def _of(self, path: str) -> CommitTree | None:
        return self.trees.get(path.split("/", 1)[0])

    def read(self, path: str) -> bytes | None:
        tree = self._of(path)
        return tree.read(path) if tree is not None else None

    def blob(self, sha: str) -> bytes | None:
        return next((data for tree in self.trees.values() if (data := tree.blob(sha)) is not None), None)

    def symlink_prefix(self, path: str) -> str | None:
        tree = self._of(path)
        return tree.symlink_prefix(path) if tree is not None else None

    def prefetch(self, paths: Iterable[str]) -> None:
        for path in paths:
            self.read(path)


@dataclass
class Project:
    root: Path
    pin: UpstreamPin  # the first pin: the default upstream of a patch, the image's version
    series: list[SeriesEntry]
    patches: list[Patch]
    variant_configs: dict[str, VariantConfig]
    pins: tuple[UpstreamPin, ...]  # every pin, `pin` first
    _resolved: dict[str, Resolved] = field(default_factory=dict, init=False, repr=False)  # per pin, once
    _pin_trees: dict[str, CommitTree] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def load(cls, root: Path) -> Project:
        pins = load_pins(root / "patches" / "upstream.yaml")
        roots = {p.name: p.package_root for p in pins}
        series_path = root / "patches" / "series"
        series = parse_series(series_path)
        patches = []
        for entry in series:
            path = root / "patches" / entry.filename
            if not path.is_file():
                raise PatchError(
                    f"{series_path}:{entry.line}: {entry.filename} is listed but does not exist",
                    hint="add the file or remove the line from patches/series",
                )
            patches.append(parse_patch(path, roots))
        variants = {path.stem: load_variant(path) for path in sorted((root / "images").glob("*.yaml"))}  # name == stem
        return cls(root, pins[0], series, patches, variants, pins)

    @property
    def roots(self) -> dict[str, str]:
        """Pin name -> its package root, the first pin first."""
        return {p.name: p.package_root for p in self.pins}

    @property
    def multi(self) -> bool:
        return len(self.pins) > 1

    def pin_named(self, name: str) -> UpstreamPin:
        for p in self.pins:
            if p.name == name:
                return p
        raise ConfigError(
            unknown_name("upstream", name, [p.name for p in self.pins]),
            hint="the upstreams are the pins of patches/upstream.yaml (the top level and `also:`)",
        )

    def target(self, item: str) -> tuple[str, str]:
        """An `--onto` value: `NAME=REF` (NAME a pin) -> (NAME, REF); a plain REF is the first pin's."""
        name, eq, ref = item.partition("=")
        if eq and name in self.roots:
            return name, ref
        if eq and self.multi:
            self.pin_named(name)  # ConfigError naming the pins
        return self.pin.name, item

    def upstream_of(self, patch: Patch) -> UpstreamPin:
        """The pin `patch` applies to."""
        return self.pin_named(patch.upstream) if patch.upstream else self.pin

    def listing(self) -> SeriesListing:
        """The series in order, each patch with its group, pin, paths and DEP-3 fields."""
        return SeriesListing(
            [ListedPatch(p.filename, p.group, self.upstream_of(p).name, list(p.paths), p.fields) for p in self.patches]
        )

    def patches_of(self, name: str) -> list[Patch]:
        """The series' patches of the pin `name`, in series order."""
        return [p for p in self.patches if self.upstream_of(p).name == name]

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @cached_property
    def series_digest(self) -> str:
        """sha256 over the series order and every patch file's bytes."""
        h = hashlib.sha256()
        for p in self.patches:
            h.update(f"{p.filename}\0{p.sha256}\n".encode())
        return h.hexdigest()

    @cached_property
    def variants(self) -> dict[str, ResolvedVariant]:
        return resolve_variants(self.variant_configs, self.patches)

    def variant(self, name: str) -> ResolvedVariant:
        if name not in self.variants:
            raise UsageError(unknown_name("variant", name, self.variants), hint="variants are the files in images/")
        return self.variants[name]

    def select(
        self,
        names: Sequence[str] | None = None,
        platform: str | None = None,
        *,
        default: Literal["first", "declared"] = "first",
    ) -> Selection:
        """The CLI's variant names (none: all, parents first) and --platform: None (each variant's first declared
        platform; every one with default="declared"), "all", or a comma list; bad values raise before any work."""
        wanted = () if platform is None else Platform.parse_list(platform, several=True)
        chosen = tuple(names or sorted(self.variants, key=lambda n: (len(self.variants[n].chain), n)))
        for name in chosen:
            self.variant(name)
        every = platform == ALL_PLATFORMS or default == "declared"
        per = []
        for name, v in self.variants.items():
            declared = v.image.platforms
            per.append((name, wanted or (declared if every else declared[:1])))
        return Selection(chosen, tuple(per))

    def lint(self) -> list[str]:
        """Problems that do not stop an apply but that review should catch."""
        lacking = [f"{p.filename}: DEP-3 header lacks {f}" for p in self.patches for f in missing_fields(p)]
        listed = {e.filename for e in self.series}
        unlisted = [path.name for path in sorted(self.patches_dir.glob("*.patch")) if path.name not in listed]
        return lacking + [f"{name}: not listed in patches/series" for name in unlisted]

    def refuse_bad_headers(self) -> None:
        """`patches check` and `build` refuse a patch whose header cannot say what it is and where it stands,
        and, when variants pick patches by group, a patch with no group (it would silently leave its group)."""
        patch_names = {n for p in self.patches for n in (p.name, p.filename)}
        picked = [
            (*v.revert, *(v.patches if isinstance(v.patches, list) else [])) for v in self.variant_configs.values()
        ]
        words = [w for chosen in picked for w in chosen]
        by_group = any(w not in patch_names for w in words)  # a word that names no patch names a group
        problems = []
        for p in self.patches:
            missing = refused_fields(p)
            if by_group and not p.group:
                missing.append("Group (variants pick patches by group)")
            if missing:
                problems.append(f"{self.patches_dir / p.filename}: DEP-3 header lacks {', '.join(missing)}")
        if problems:
            raise PatchError(
                "\n".join(problems),
                hint="add the fields above the diff (Description:, Upstream-Status: or Forwarded:, Group:); "
                "see docs/patch-workflow.md",
            )

    @cached_property
    def upstream(self) -> Resolved:
        """The first pin's release in the cache."""
        return self.resolved(self.pin.name)

    def resolved(self, name: str) -> Resolved:
        """A pin's release in the cache (resolved once per project)."""
        if name not in self._resolved:
            self._resolved[name] = open_pinned(self.pin_named(name))
        return self._resolved[name]

    @cached_property
    def pin_needs(self) -> list[Need]:
        """What each pinned release requires of another pin (its wheel's Requires-Dist), met, overridden or not."""
        return needs(self.pins, self.pin_requires())

    def pin_requires(self, moved: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...]]:
        """Each wheel pin's requirements (pin name -> Requires-Dist), at its pinned release or at `moved[name]`;
        none with one pin (no other pin to require)."""
        out: dict[str, tuple[str, ...]] = {}
        for p in self.pins if self.multi else ():
            if isinstance(p.source, WheelSource):
                version = (moved or {}).get(p.name, p.source.version)
                out[p.name] = Mirror(p.source, p.package_root).requires(version)
        return out

    def needs_if_moved(self, moves: Mapping[str, str]) -> list[Need]:
        """`pin_needs` as it would be with pins moved to other releases (pin name -> version or tag)."""
        versions = {name: tag.removeprefix("v") for name, tag in moves.items()}
        pins = [p.model_copy(update={"tag": f"v{versions[p.name]}"}) if p.name in versions else p for p in self.pins]
        return needs(pins, self.pin_requires(versions))

    @property
    def pin_problems(self) -> list[str]:
        """Pins that disagree with another pin's requirement (no override says why), and stale overrides."""
        return problems(self.pins, self.pin_needs)

    def pin_tree(self, name: str) -> CommitTree:
        """One pin's release (one view per project and pin)."""
        if name not in self._pin_trees:
            up = self.resolved(name)
            self._pin_trees[name] = CommitTree(up.repo, up.commit)
        return self._pin_trees[name]

    def tree(self) -> CommitTree | PinnedTrees:
        """The pinned release (one view per project, so reads are shared); with several pins, all of them as one
        tree, each path read from the release of its package root."""
        if len(self.pins) == 1:
            return self.pin_tree(self.pin.name)
        return PinnedTrees({p.package_root: self.pin_tree(p.name) for p in self.pins})

    def plan(self, names: list[str] | None = None, max_fuzz: int = 0) -> list[VariantPlan]:
        self.refuse_bad_headers()
        chosen = [self.variant(n) for n in names] if names else list(self.variants.values())
        tree = self.tree()
        return [plan_variant(v, self.patches, tree, max_fuzz=max_fuzz) for v in chosen]


def load_project(chosen: Path | None = None) -> Project:
    """The project `find_root` finds (`chosen`: the command's --project)."""
    return Project.load(find_root(chosen=chosen))
