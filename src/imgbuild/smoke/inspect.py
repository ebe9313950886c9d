"""`imgbuild inspect IMAGE`: an image's labels checked against what it holds (smoke's static checks), and the
image references `smoke` and `inspect` take: a local name as it is, a registry one pulled by digest."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from imgbuild.engine import Engine, ImageInfo
from imgbuild.errors import ConfigError, DockerError, RegistryError
from imgbuild.plan import labels as lbl
from imgbuild.platforms import Platform
from imgbuild.registry import reference, tools
from imgbuild.smoke.checks import (
    FileRow,
    config_checks,
    expected_from_labels,
    file_rows,
    find_base,
    integrity_checks,
    read_digests,
)


@dataclass
class InspectReport:
    ref: str
    info: ImageInfo
    files: list[FileRow] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # checks that could not be made, and why

    @property
    def ok(self) -> bool:
        return not self.disagreements

    def patches(self) -> dict[str, str]:
        try:
            data = json.loads(self.info.labels.get(f"{lbl.PREFIX}patches") or "{}")
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def upstreams(self) -> list[dict[str, object]]:
        """Every pinned upstream with the patches applied to it: `imgbuild.upstreams`, else the one pin's labels."""
        lab = self.info.labels
        if lab.get(lbl.UPSTREAMS):
            try:
                return lbl.parse_upstreams(lab[lbl.UPSTREAMS])
            except ValueError:
                return []
        if f"{lbl.PREFIX}upstream.commit" not in lab:
            return []
        pin = {k: lab.get(f"{lbl.PREFIX}upstream.{k}") for k in ("url", "tag", "commit")}
        return [{"name": None, **pin, "patches": [n for n, state in self.patches().items() if state == "applied"]}]

    def to_json(self) -> dict[str, object]:
        info = self.info
        return {
            "upstreams": self.upstreams(),
            "image": self.ref,
            "image_id": info.id,
            "platform": str(info.platform),
            "tags": list(info.tags),
            "entrypoint": None if info.entrypoint is None else list(info.entrypoint),
            "cmd": None if info.cmd is None else list(info.cmd),
            "rootfs_layers": list(info.layers),
            "labels": info.labels,
            "patches": self.patches(),
            "files": [f.to_json() for f in self.files],
            "built_by_imgbuild": lbl.INPUTS in info.labels,
            "disagreements": self.disagreements,
            "notes": self.notes,
            "ok": self.ok,
        }


def inspect_image(engine: Engine, ref: str) -> InspectReport:
    """The files re-hashed, then smoke's config checks (and, for an imgbuild image, its layers, ENV, labels)."""
    info = engine.require(ref)
    report = InspectReport(ref, info)
    expected = expected_from_labels(info)
    if expected.files and expected.site_packages:
        report.files = file_rows(expected, read_digests(engine, info.id, expected))
    for row in report.files:
        if not row.ok:
            have = f"{row.actual} ({row.actual_sha256[:12]})" if row.actual_sha256 else row.actual
            report.disagreements.append(
                f"{row.path}: labels say {row.expected} ({row.expected_sha256[:12]}), the image holds {have}"
            )
    checks = config_checks(info, expected)
    if lbl.INPUTS in info.labels:  # layers, ENV and labels as imgbuild wrote them
        checks += integrity_checks(info, expected, find_base(engine, expected.base_ref, None, info.platform))
    report.disagreements += [f"{c.name}: {c.detail}" for c in checks if c.status == "fail"]
    report.notes += [f"{c.name}: {c.detail}" for c in checks if c.status == "skip"]
    return report


def is_registry_ref(text: str) -> bool:
    first, _, rest = text.partition("/")
    return bool(rest) and ("." in first or ":" in first or first == "localhost")


def localize(engine: Engine, text: str, platform: str | None = None) -> str:
    """A reference the daemon has for `platform` (default: the daemon's); a registry one pulled by digest."""
    want = Platform.parse(platform) if platform else None
    local = engine.image(text)
    if local is not None and (want is None or local.platform == want):
        return text
    if not is_registry_ref(text):
        if local is not None and want is not None:
            raise DockerError(
                f"{text} in the local store is {local.platform}, not {want}",
                hint="name that platform's own image: `imgbuild build --json` lists each platform's immutable tag",
            )
        return text
    try:
        ref = reference.parse(text)
    except ConfigError:
        return text
    plat = want or engine.arch
    top = tools.inspect_required(str(ref))  # the platform's manifest: the one, or the index's entry
    found = [digest for p, digest in top.entries() if p == str(plat)] if top.is_index else [top.digest]
    if not found:
        have = ", ".join(p or "unknown" for p, _ in top.entries()) or "none"
        raise RegistryError(f"{ref} has no {plat} image (it has {have})")
    pinned = f"{ref.name}@{found[0]}"
    if engine.image(pinned) is None:
        try:
            engine.pull(pinned, plat)
        except DockerError as exc:
            raise DockerError(
                f"cannot pull {pinned} ({plat}) for checking: {exc.message}",
                hint="the daemon pulls with its own credentials: `docker login " + ref.host + "`",
            ) from exc
    return pinned
