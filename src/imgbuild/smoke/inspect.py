"""`imgbuild inspect IMAGE`: what an image says about itself (its labels), checked against what it holds:
its files re-hashed, its layers, ENV and labels against the base and the `imgbuild.config` label."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from imgbuild.engine import Engine, ImageInfo
from imgbuild.plan import labels as lbl
from imgbuild.smoke import integrity
from imgbuild.smoke.checks import FileRow, expected_from_labels, file_rows, integrity_checks, read_digests


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
        """Every pinned upstream the image names, each with the patches applied to it: `imgbuild.upstreams`
        when the project pins several, else the one `imgbuild.upstream.*` pin with every applied patch."""
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
    info = engine.require(ref)
    report = InspectReport(ref, info)
    missing = lbl.missing_required(info.labels)
    if missing:
        report.disagreements.append(f"labels missing: {', '.join(missing)}")
    expected = expected_from_labels(info)
    if expected.files and expected.site_packages:
        report.files = file_rows(expected, read_digests(engine, info.id, expected))
    for row in report.files:
        if not row.ok:
            have = f"{row.actual} ({row.actual_sha256[:12]})" if row.actual_sha256 else row.actual
            report.disagreements.append(
                f"{row.path}: labels say {row.expected} ({row.expected_sha256[:12]}), the image holds {have}"
            )
    kept = info.labels.get(lbl.ENTRYPOINT) == "keep"  # the base's passthrough ENTRYPOINT, kept on purpose
    if (info.entrypoint and not kept) or info.cmd:
        report.disagreements.append(
            f"ENTRYPOINT {list(info.entrypoint or ())} / CMD {list(info.cmd or ())}: imgbuild images clear both"
            + (" (the ENTRYPOINT is kept: image.entrypoint: keep; CMD is cleared)" if kept else "")
        )
    if lbl.INPUTS in info.labels:  # layers, ENV and labels as imgbuild wrote them
        against = integrity.reference(engine, expected.base_ref, None, len(expected.layers), info.platform)
        for c in integrity_checks(info, expected, against):
            if c.status == "fail":
                report.disagreements.append(f"{c.name}: {c.detail}")
            elif c.status == "skip":
                report.notes.append(f"{c.name}: {c.detail}")
    return report
