"""Smoke tests of a built image, in three groups.

1. config: os/arch as declared; ENTRYPOINT and CMD empty; the required labels
   present (and, for a variant, equal to what the current plan expects).
2. files: the sha256 of every planned file, read from the image without
   running it, matches its expected state (patched or original).
3. runtime (under qemu when the arch differs): `docker run IMAGE python3 -c`
   with no entrypoint override, which only works when ENTRYPOINT is cleared;
   every planned file byte-compiles with the image's own Python; then the
   variant's smoke commands. On a skeleton base (no torch) the variant's
   `smoke.skeleton_commands` run instead and `smoke.commands` are reported
   as skipped, never silently passed.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from imgbuild import labels as lbl
from imgbuild.config import SmokeSpec
from imgbuild.docker_engine import BINFMT_FIX, QEMU_NAMES, Engine, ImageInfo, check_binfmt
from imgbuild.errors import DockerError

# Runs with python3-minimal (no json module): plain lines out.
PROBE = """\
import sys
print("imgbuild-smoke python", sys.version.split()[0])
for p in sys.argv[1:]:
    try:
        with open(p, "rb") as f:
            compile(f.read(), p, "exec", dont_inherit=True)
        print("compile-ok", p)
    except Exception as e:
        print("compile-fail", p, type(e).__name__, str(e).replace("\\n", " ")[:300])
"""


@dataclass(frozen=True)
class Expected:
    """What an image should be: from the build plan (a variant) or from its own labels (an image)."""

    platform: str
    files: tuple[lbl.FileLabel, ...]
    site_packages: str
    labels: Mapping[str, str] | None = None  # exact labels to compare, when a plan is known
    smoke: SmokeSpec | None = None
    variant: str | None = None


@dataclass(frozen=True)
class Check:
    group: str  # config, files, runtime, command
    name: str
    status: str  # pass, fail, skip
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "group": self.group,
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class FileRow:
    path: str
    expected: str  # patched / original
    actual: str  # patched / original / absent / other
    expected_sha256: str
    actual_sha256: str | None

    @property
    def ok(self) -> bool:
        return self.actual_sha256 == self.expected_sha256

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "expected": self.expected,
            "actual": self.actual,
            "expected_sha256": self.expected_sha256,
            "actual_sha256": self.actual_sha256,
            "ok": self.ok,
        }


@dataclass
class SmokeReport:
    image: str
    image_id: str
    variant: str | None
    platform: str
    checks: list[Check] = field(default_factory=list)
    files: list[FileRow] = field(default_factory=list)
    name: str = ""  # how tables call the image (e.g. its moving tag); default: `image`

    @property
    def title(self) -> str:
        return self.name or self.image

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def to_json(self) -> dict[str, object]:
        return {
            "image": self.image,
            "image_id": self.image_id,
            "variant": self.variant,
            "platform": self.platform,
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
            "files": [f.to_json() for f in self.files],
        }


def classify(data: bytes | None, f: lbl.FileLabel) -> tuple[str, str | None]:
    """(state, sha256) of what the image holds for a planned file."""
    if data is None:
        return "absent", None
    digest = hashlib.sha256(data).hexdigest()
    if digest == f.sha256:
        return f.state, digest
    if digest == f.pristine_sha256:
        return "original", digest
    return "other", digest


def file_rows(engine: Engine, ref: str, expected: Expected) -> list[FileRow]:
    site = expected.site_packages.rstrip("/")
    paths = [f"{site}/{f.path}" for f in expected.files]
    data = engine.read_files(ref, paths, expected.platform) if paths else {}
    rows = []
    for f, path in zip(expected.files, paths, strict=True):
        state, digest = classify(data[path], f)
        rows.append(FileRow(f.path, f.state, state, f.sha256, digest))
    return rows


def config_checks(info: ImageInfo, expected: Expected) -> list[Check]:
    checks = []
    arch = expected.platform.split("/")[1]
    ok = info.os == "linux" and info.arch == arch
    checks.append(
        Check("config", "platform", "pass" if ok else "fail", f"image is {info.platform}, declared {expected.platform}")
    )
    for name, value in (("entrypoint", info.entrypoint), ("cmd", info.cmd)):
        empty = not value
        detail = "empty" if empty else f"{name.upper()} is {list(value or ())}; launchers append their own command"
        checks.append(Check("config", name, "pass" if empty else "fail", detail))
    missing = lbl.missing_required(info.labels)
    checks.append(
        Check(
            "config",
            "labels-present",
            "fail" if missing else "pass",
            f"missing: {', '.join(missing)}" if missing else f"{len(lbl.REQUIRED)} required labels",
        )
    )
    if expected.labels is not None:
        wrong = [k for k, v in expected.labels.items() if info.labels.get(k) != v]
        detail = "; ".join(
            f"{k}: image has {_cut(info.labels.get(k))}, plan says {_cut(expected.labels[k])}" for k in wrong
        )
        checks.append(Check("config", "labels-match-plan", "fail" if wrong else "pass", detail or "all labels agree"))
    return checks


def _cut(value: str | None, n: int = 80) -> str:
    if value is None:
        return "nothing"
    return repr(value if len(value) <= n else value[:n] + "...")


def runtime_checks(engine: Engine, ref: str, info: ImageInfo, expected: Expected, timeout: int) -> list[Check]:
    check_binfmt(info.arch, engine.arch)
    site = expected.site_packages.rstrip("/")
    paths = [f"{site}/{f.path}" for f in expected.files]
    t0 = time.monotonic()
    res = engine.run(ref, ["python3", "-c", PROBE, *paths], platform=expected.platform, timeout=timeout)
    took = time.monotonic() - t0
    _exec_format(res.stderr, info.arch, engine.arch)
    lines = res.stdout.splitlines()
    head = next((ln for ln in lines if ln.startswith("imgbuild-smoke python")), None)
    checks = []
    if res.exit_code != 0 or head is None:
        why: list[str] = (res.stderr or res.stdout).strip().splitlines()[-1:] or [f"exit {res.exit_code}"]
        if info.entrypoint:
            why.append(f"ENTRYPOINT {list(info.entrypoint)} swallowed the command")
        checks.append(Check("runtime", "run-directly", "fail", "; ".join(why), took))
    else:
        checks.append(Check("runtime", "run-directly", "pass", head.removeprefix("imgbuild-smoke "), took))
    results: dict[str, tuple[bool, str]] = {}
    for ln in lines:
        word, _, rest = ln.partition(" ")
        if word in ("compile-ok", "compile-fail"):
            path, _, reason = rest.partition(" ")
            results[path] = (word == "compile-ok", reason)
    for f, path in zip(expected.files, paths, strict=True):
        ok, reason = results.get(path, (False, "not run"))
        checks.append(Check("runtime", f"compile {f.path}", "pass" if ok else "fail", reason or "byte-compiles"))
    return checks


def _exec_format(stderr: str, arch: str, daemon_arch: str) -> None:
    if "exec format error" in stderr:
        qemu = QEMU_NAMES.get(arch, arch)
        raise DockerError(
            f"linux/{arch} binaries do not run on this linux/{daemon_arch} daemon (exec format error)",
            hint=BINFMT_FIX.format(qemu=qemu),
        )


def command_checks(engine: Engine, ref: str, info: ImageInfo, expected: Expected) -> list[Check]:
    spec = expected.smoke
    if spec is None:
        return []
    skeleton = lbl.SKELETON in info.labels
    checks = []
    commands = spec.skeleton_commands if skeleton else spec.commands
    if skeleton:
        for cmd in spec.commands:
            checks.append(Check("command", cmd, "skip", "needs the real base (the skeleton stand-in has no torch)"))
    for cmd in commands:
        t0 = time.monotonic()
        res = engine.run(ref, ["/bin/sh", "-c", cmd], platform=expected.platform, timeout=spec.timeout)
        took = time.monotonic() - t0
        _exec_format(res.stderr, info.arch, engine.arch)
        if res.timed_out:
            checks.append(Check("command", cmd, "fail", f"timed out after {spec.timeout}s", took))
        elif res.exit_code != 0:
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
            checks.append(Check("command", cmd, "fail", f"exit {res.exit_code}: {tail[0][:300]}", took))
        else:
            checks.append(Check("command", cmd, "pass", "exit 0", took))
    return checks


def smoke(engine: Engine, ref: str, expected: Expected, *, runtime: bool = True) -> SmokeReport:
    """Run every check on `ref`; a failing check is recorded, never raised."""
    info = engine.require(ref)
    report = SmokeReport(ref, info.id, expected.variant, expected.platform)
    report.checks.extend(config_checks(info, expected))
    t0 = time.monotonic()
    report.files = file_rows(engine, info.id, expected)
    took = time.monotonic() - t0
    for row in report.files:
        status = "pass" if row.ok else "fail"
        detail = (
            f"{row.actual}" if row.ok else f"expected {row.expected} {row.expected_sha256[:12]}, image has {row.actual}"
        )
        if row.actual_sha256 and not row.ok:
            detail += f" {row.actual_sha256[:12]}"
        report.checks.append(Check("files", row.path, status, detail, took / max(len(report.files), 1)))
    if runtime:
        timeout = expected.smoke.timeout if expected.smoke else 600
        report.checks.extend(runtime_checks(engine, info.id, info, expected, timeout))
        report.checks.extend(command_checks(engine, info.id, info, expected))
    return report


def expected_from_labels(info: ImageInfo, smoke_spec: SmokeSpec | None = None) -> Expected:
    """What an image claims about itself (for `smoke IMAGE` and `inspect`)."""
    files: tuple[lbl.FileLabel, ...] = ()
    raw = info.labels.get(f"{lbl.PREFIX}files")
    if raw:
        try:
            files = tuple(lbl.parse_files(raw))
        except ValueError as exc:
            raise DockerError(f"image {info.id[:19]}: unreadable imgbuild.files label: {exc}") from exc
    return Expected(
        platform=info.platform,
        files=files,
        site_packages=info.labels.get(f"{lbl.PREFIX}site-packages", ""),
        smoke=smoke_spec,
        variant=info.labels.get(f"{lbl.PREFIX}variant"),
    )


def summary(reports: Sequence[SmokeReport]) -> str:
    total = sum(len(r.checks) for r in reports)
    failed = sum(len(r.failures) for r in reports)
    skipped = sum(1 for r in reports for c in r.checks if c.status == "skip")
    return f"{total - failed - skipped} passed, {failed} failed, {skipped} skipped"
