"""`imgbuild publish`: multi-arch images straight into a registry, without pulling the base.

The registry-native path. For each variant and platform:

1. take the base by digest from `images.lock`, and read only its manifest and
   config from the registry (a few KB);
2. plan the layers and labels exactly as `imgbuild build` does (buildplan),
   with the base's config digest standing in for its image id;
3. make each overlay layer as a deterministic gzipped tar (ocilayer), and the
   config as the base's config with the layers appended, ENV and LABEL
   applied, ENTRYPOINT and CMD cleared, `created` from the inputs;
4. upload: base blobs are mounted across repositories (or, when the base
   lives in another registry, copied blob by blob), new layers and configs
   are uploaded unless present, per-platform manifests are put by digest;
5. only then write the index under the immutable tag, then the moving tags.

Equal inputs give equal bytes, so a second publish finds the immutable tag
already pointing at the index it would write and uploads nothing. Tags are
the last thing written: a failure before them leaves every tag as it was.
"""

from __future__ import annotations

import calendar
import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imgbuild.errors import ConfigError, RegistryError
from imgbuild.images import labels, signing
from imgbuild.images import sbom as sbommod
from imgbuild.images.inputs import project_inputs
from imgbuild.images.oci import Blob, Layer, canonical_json, derive_config, make_layer
from imgbuild.images.plan import BaseInfo, BuildPlan, ImageBuild, LayerBuild, make_build_plan
from imgbuild.patches.variants import VariantPlan
from imgbuild.project import Project, Selection
from imgbuild.registry import reference
from imgbuild.registry.client import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    Manifest,
    Registries,
    Registry,
    Stats,
)
from imgbuild.registry.lock import Lock, LockedBase, load_lock, missing_platforms, normalize_platform

INDEX_FORMAT = "imgbuild-index/1"
LAYER_TYPES = {
    DOCKER_MANIFEST: "application/vnd.docker.image.rootfs.diff.tar.gzip",
    OCI_MANIFEST: "application/vnd.oci.image.layer.v1.tar+gzip",
}
INDEX_OF = {DOCKER_MANIFEST: DOCKER_LIST, OCI_MANIFEST: OCI_INDEX}
Say = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclass(frozen=True)
class RemoteBase:
    """A base image for one platform, as its registry holds it."""

    ref: reference.Reference  # repository of the base, with the platform manifest digest
    manifest: Manifest
    config: dict[str, object] = field(repr=False)
    info: BaseInfo

    @property
    def layers(self) -> list[dict[str, object]]:
        value = self.manifest.json().get("layers") or []
        return list(value) if isinstance(value, list) else []


@dataclass(frozen=True)
class PlatformImage:
    build: ImageBuild
    base: RemoteBase
    layers: tuple[Layer, ...]  # the overlay layers, bottom first
    config: Blob
    manifest: Blob
    media_type: str

    @property
    def platform_json(self) -> dict[str, str]:
        out = {"architecture": str(self.base.config.get("architecture")), "os": str(self.base.config.get("os"))}
        if self.base.config.get("variant"):
            out["variant"] = str(self.base.config["variant"])
        return out


@dataclass(frozen=True)
class VariantPublish:
    variant: str
    target: reference.Reference  # the repository, no tag
    images: tuple[PlatformImage, ...]
    index: Blob
    index_type: str
    immutable_tag: str
    moving_tags: tuple[str, ...]

    @property
    def refs(self) -> list[str]:
        return [str(self.target.with_tag(t)) for t in (self.immutable_tag, *self.moving_tags)]

    def to_json(self) -> dict[str, object]:
        return {
            "variant": self.variant,
            "repository": self.target.name,
            "index": self.index.digest,
            "immutable": str(self.target.with_tag(self.immutable_tag)),
            "moving": [str(self.target.with_tag(t)) for t in self.moving_tags],
            "platforms": {
                pi.build.platform: {
                    "manifest": pi.manifest.digest,
                    "config": pi.config.digest,
                    "inputs": pi.build.inputs_digest,
                    "base": pi.base.manifest.digest,
                    "layers": [{"digest": lay.blob.digest, "size": lay.blob.size} for lay in pi.layers],
                }
                for pi in self.images
            },
        }


@dataclass
class Outcome:
    variant: str
    index: str
    state: str  # "published", "unchanged", "retagged"
    moved: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


# -- planning (reads manifests and configs only) ----------------------------------
def fetch_base(regs: Registries, locked: LockedBase, platform: str, site_packages: str | None) -> RemoteBase:
    ref = reference.parse(locked.ref)
    digest = locked.platform_digest(normalize_platform(platform))
    if digest is None:
        raise ConfigError(f"images.lock: base {locked.ref} has no {platform} entry", hint="run `imgbuild lock`")
    reg = regs.get(ref)
    manifest = reg.get_manifest(ref.repository, digest)
    if manifest.media_type not in LAYER_TYPES:
        raise RegistryError(f"{ref.name}@{digest} is a {manifest.media_type}, not an image manifest")
    desc = manifest.json().get("config")
    if not isinstance(desc, dict):
        raise RegistryError(f"{ref.name}@{digest} has no config")
    config_digest = str(desc["digest"])
    config = json.loads(reg.get_blob(ref.repository, config_digest))
    arch = normalize_platform(f"{config.get('os')}/{config.get('architecture')}")
    if arch != normalize_platform(platform):
        raise RegistryError(f"{ref.name}@{digest} is {arch}, but the lock lists it for {platform}")
    base_labels = (config.get("config") or {}).get("Labels") or {}
    site = site_packages or base_labels.get(f"{labels.PREFIX}site-packages")
    if not site:
        raise ConfigError(
            f"publishing on {locked.ref} needs image.site_packages: the registry path never runs the base",
            hint="set image.site_packages (e.g. /usr/local/lib/python3.12/dist-packages) in the root variant",
        )
    info = BaseInfo(
        ref=locked.ref,
        image_id=config_digest,
        digest=digest,
        platform=normalize_platform(platform),
        site_packages=str(site),
        skeleton=labels.SKELETON in base_labels,
    )
    return RemoteBase(ref.with_digest(digest), manifest, config, info)


def _layer_files(lb: LayerBuild, plans: Mapping[str, VariantPlan], site: str) -> dict[str, bytes]:
    plan = plans[lb.variants[0]]
    return {f"{site.strip('/')}/{path}": plan.contents[path] for path in lb.files}


def _epoch(created: str) -> int:
    return calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))


def plan_publish(
    project: Project,
    lock: Lock,
    selection: Selection,
    registry: str,
    regs: Registries,
    *,
    repository: str | None = None,
) -> list[VariantPublish]:
    """Everything to upload, computed before the first write (`selection`: Project.select(..., default="declared"))."""
    variants = selection.names
    problems = missing_platforms(lock)
    if problems:
        raise ConfigError("images.lock: " + "; ".join(problems), hint="run `imgbuild lock`")
    plans = project.selected_plans(selection)
    by_name = {p.variant.name: p for p in plans}
    bases: dict[tuple[str, str], RemoteBase] = {}
    for p in plans:
        locked = lock.base_of(p.variant.name)
        for platform in p.variant.image.platforms:
            bases[(p.variant.name, platform)] = fetch_base(regs, locked, platform, p.variant.image.site_packages)
    inputs = project_inputs(project)
    # Digests and labels are planned with the configured repository (a layer's
    # FROM names it), so publishing elsewhere with --repository changes where
    # the image goes, not what it is.
    configured = all(p.variant.image.repository for p in plans)
    bp = make_build_plan(
        inputs,
        plans,
        {k: b.info for k, b in bases.items()},
        list(variants),
        repository=None if configured else repository,
    )
    mtime = _epoch(inputs.created)
    made: dict[str, Layer] = {}
    out = []
    for name in variants:
        images = []
        for ib in (i for i in bp.images if i.variant == name):
            base = bases[(name, ib.platform)]
            layers = tuple(_layer(bp, d, by_name, base.info.site_packages, mtime, made) for d in ib.layers)
            images.append(_platform_image(ib, base, layers, inputs.created))
        out.append(_variant(name, images, registry, inputs.upstream.version, repository))
    return out


def _layer(
    bp: BuildPlan, digest: str, plans: Mapping[str, VariantPlan], site: str, mtime: int, made: dict[str, Layer]
) -> Layer:
    lb = bp.layer(digest)
    files = _layer_files(lb, plans, site)
    key = hashlib.sha256(repr(sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items())).encode())
    if key.hexdigest() not in made:
        made[key.hexdigest()] = make_layer(files, mtime)
    return made[key.hexdigest()]


def _platform_image(ib: ImageBuild, base: RemoteBase, layers: tuple[Layer, ...], created: str) -> PlatformImage:
    config = derive_config(
        base.config,
        layers=layers,
        layer_names=ib.layers,
        env=ib.plan.variant.image.env,
        labels=ib.labels,
        created=created,
        comment=f"imgbuild image {ib.variant}: ENV, LABEL, ENTRYPOINT [] and CMD [] (inputs {ib.inputs_digest[:12]})",
    )
    config_blob = Blob.of(canonical_json(config))
    media = base.manifest.media_type
    manifest = base.manifest.json()
    base_config = manifest.get("config")
    config_type = str(base_config.get("mediaType")) if isinstance(base_config, dict) else ""
    new_layers = [{"mediaType": LAYER_TYPES[media], "size": lay.blob.size, "digest": lay.blob.digest} for lay in layers]
    body: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": media,
        "config": {"mediaType": config_type, "size": config_blob.size, "digest": config_blob.digest},
        "layers": [*base.layers, *new_layers],
    }
    if media == OCI_MANIFEST:  # Docker's schema 2 has no annotations
        body["annotations"] = labels.oci_annotations(ib.labels)
    return PlatformImage(ib, base, layers, config_blob, Blob.of(canonical_json(body)), media)


def _variant(
    name: str, images: Sequence[PlatformImage], registry: str, version: str, repository: str | None
) -> VariantPublish:
    if not images:
        raise ConfigError(f"variant {name}: no platform to publish")
    media = {pi.media_type for pi in images}
    if len(media) != 1:
        raise RegistryError(f"variant {name}: the bases mix manifest types ({', '.join(sorted(media))})")
    index_type = INDEX_OF[media.pop()]
    ordered = sorted(images, key=lambda pi: pi.build.platform)
    body: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": index_type,
        "manifests": [
            {
                "mediaType": pi.media_type,
                "size": pi.manifest.size,
                "digest": pi.manifest.digest,
                "platform": pi.platform_json,
            }
            for pi in ordered
        ],
    }
    if index_type == OCI_INDEX:  # the keys every platform agrees on (base.digest differs, for one)
        per = [labels.oci_annotations(pi.build.labels) for pi in ordered]
        body["annotations"] = {k: v for k, v in per[0].items() if all(a.get(k) == v for a in per)}
    first = ordered[0].build
    if len(ordered) == 1:
        inputs = first.inputs_digest
    else:
        lines = [INDEX_FORMAT, *(f"{pi.build.platform} {pi.build.inputs_digest}" for pi in ordered)]
        inputs = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    target = reference.join(registry, repository or first.repository)
    tags = first.plan.variant.image.tags
    return VariantPublish(
        variant=name,
        target=target,
        images=tuple(ordered),
        index=Blob.of(canonical_json(body)),
        index_type=index_type,
        immutable_tag=f"{version}-{inputs[:12]}",
        moving_tags=tuple(tags),
    )


# -- uploading ------------------------------------------------------------------------
def push_variant(vp: VariantPublish, regs: Registries, say: Say = _stderr) -> Outcome:
    reg = regs.get(vp.target)
    repo = vp.target.repository
    reg.need(repo, "pull", "push")
    for pi in vp.images:
        if pi.base.ref.host == vp.target.host:
            reg.need(pi.base.ref.repository, "pull")
    current = reg.head_manifest(repo, vp.immutable_tag)
    outcome = Outcome(vp.variant, vp.index.digest, "unchanged")
    if current != vp.index.digest:
        for pi in vp.images:
            _push_image(reg, regs, repo, pi, say)
        reg.put_manifest(repo, vp.immutable_tag, vp.index.data, vp.index_type)
        outcome.state = "published"
        say(f"{vp.variant}: {vp.target.with_tag(vp.immutable_tag)} -> {vp.index.digest}")
    for tag in vp.moving_tags:
        if reg.head_manifest(repo, tag) != vp.index.digest:
            reg.put_manifest(repo, tag, vp.index.data, vp.index_type)
            outcome.moved.append(tag)
    if outcome.moved:
        say(f"{vp.variant}: moved {', '.join(outcome.moved)}")
        if outcome.state == "unchanged":
            outcome.state = "retagged"
    elif outcome.state == "unchanged":
        say(f"{vp.variant}: {vp.target.with_tag(vp.immutable_tag)} already published; nothing uploaded")
    return outcome


def _push_image(reg: Registry, regs: Registries, repo: str, pi: PlatformImage, say: Say) -> None:
    if reg.head_manifest(repo, pi.manifest.digest) == pi.manifest.digest:
        return
    same = pi.base.ref.host == reg.host
    src = regs.get(pi.base.ref)
    for desc in pi.base.layers:
        digest = str(desc["digest"])
        how = reg.ensure_blob(
            repo,
            digest,
            mount_from=pi.base.ref.repository if same else None,
            copy_from=None if same else (src, pi.base.ref.repository),
        )
        if how == "copied":
            say(f"copied base layer {digest[:19]} from {pi.base.ref.host}")
    for layer in pi.layers:
        reg.ensure_blob(repo, layer.blob.digest, layer.blob.data)
    reg.ensure_blob(repo, pi.config.digest, pi.config.data)
    reg.put_manifest(repo, pi.manifest.digest, pi.manifest.data, pi.media_type)


def attach(plan: Sequence[VariantPublish], key: Path, *, sbom: bool, sign: bool, say: Say = _stderr) -> list[str]:
    """After the push: an SPDX SBOM attested on each platform manifest, then a signature on each index."""
    done = []
    for vp in plan:
        if sbom:
            for pi in vp.images:
                facts = sbommod.ImageFacts(
                    name=vp.target.name,
                    title=pi.build.labels.get(f"{labels.OCI}title", vp.variant),
                    platform=pi.build.platform,
                    manifest_digest=pi.manifest.digest,
                    labels=pi.build.labels,
                    base_name=labels.qualified(pi.base.info.ref),
                    base_digest=pi.base.manifest.digest,
                    site_packages=pi.base.info.site_packages,
                    files=tuple(labels.file_labels(pi.build.plan)),
                )
                ref = f"{vp.target.name}@{pi.manifest.digest}"
                signing.attest_sbom(ref, sbommod.render(sbommod.spdx(facts)), key)
                done.append(f"sbom {ref}")
                say(f"{vp.variant} {pi.build.platform}: SPDX SBOM attested on {pi.manifest.digest[:19]}")
        if sign:
            ref = f"{vp.target.name}@{vp.index.digest}"
            signing.sign(ref, key)
            done.append(f"signature {ref}")
            say(f"{vp.variant}: index {vp.index.digest[:19]} signed")
    return done


@dataclass
class PublishResult:
    """What a publish did (or, `outcomes` None, would do): the plan, each variant's outcome, the registry
    traffic of the whole run, what was attached (SBOMs, signatures) and how long it took."""

    plan: list[VariantPublish]
    outcomes: list[Outcome] | None = None
    stats: Stats | None = None
    attached: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        if self.outcomes is None or self.stats is None:
            return {"dry_run": True, "variants": [vp.to_json() for vp in self.plan]}
        return {
            "variants": [{**vp.to_json(), **o.to_json()} for vp, o in zip(self.plan, self.outcomes, strict=True)],
            "stats": self.stats.to_json(),
            "attached": self.attached,
            "seconds": round(self.seconds, 3),
        }


def _lock(project: Project) -> Lock:
    lock = load_lock(project.root)
    if lock is None:
        raise ConfigError(
            "images.lock is missing: publishing takes each base by digest from it", hint="run `imgbuild lock`"
        )
    return lock


def dry_run(project: Project, selection: Selection, registry: str, *, repository: str | None = None) -> PublishResult:
    """The plan with its digests; reads manifests and configs, writes nothing."""
    t0 = time.perf_counter()
    lock = _lock(project)
    with Registries() as regs:
        plan = plan_publish(project, lock, selection, registry, regs, repository=repository)
    return PublishResult(plan, seconds=time.perf_counter() - t0)


def publish(
    project: Project,
    selection: Selection,
    registry: str,
    *,
    repository: str | None = None,
    regs: Registries | None = None,
    key: Path | None = None,
    sbom: bool = False,
    sign: bool = False,
    say: Say = _stderr,
) -> PublishResult:
    """Plan, push each variant, then attach SBOMs and signatures (with `key`)."""
    t0 = time.perf_counter()
    lock = _lock(project)
    own = regs is None
    regs = regs or Registries()
    try:
        plan = plan_publish(project, lock, selection, registry, regs, repository=repository)
        outcomes = [push_variant(vp, regs, say) for vp in plan]
        stats = regs.stats()
    finally:
        if own:
            regs.close()
    attached = attach(plan, key, sbom=sbom, sign=sign, say=say) if key is not None and (sbom or sign) else []
    return PublishResult(plan, outcomes, stats, attached, time.perf_counter() - t0)
