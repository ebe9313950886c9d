"""Smoke tests of a built image.

1. config: os/arch as declared; ENTRYPOINT (unless kept: `image.entrypoint:
   keep`) and CMD empty; the required
   labels present (and, for a variant, equal to what the current plan
   expects); integrity: the layers are the base's then imgbuild's, by diff id,
   and ENV and labels are the plan's (integrity.py).
2. files: the sha256 of every planned file matches its expected state.
3. runtime (under qemu when the arch differs), in one container per image:
   the probe (probe.py) runs as `docker run IMAGE python3 -c` with no
   entrypoint override, which only works when ENTRYPOINT is cleared; it hashes
   and byte-compiles every planned file with the image's own Python, runs the
   variant's smoke commands, then imports the planned modules and the
   release's modules importing them, and runs `vllm --version` through the
   console script's entry point in the same process. On a skeleton
   base (no torch) `smoke.skeleton_commands` run instead, and `smoke.commands`
   and the imports are reported as skipped, never silently passed.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from imgbuild.config.models import SmokeSpec
from imgbuild.engine import BINFMT_FIX, Engine, ImageInfo, RunResult, check_binfmt
from imgbuild.errors import DockerError
from imgbuild.plan import labels as lbl
from imgbuild.platforms import Platform
from imgbuild.smoke import integrity, launchcheck, probe, runtime_run
from imgbuild.smoke.importcheck import modules_to_import
from imgbuild.upstream.mirror import cache_dir

SKELETON_SKIP = "needs the real base (the skeleton stand-in has no torch)"
CLI = "vllm"  # the console script whose `--version` smoke runs in the image
NO_DEVICE = "Failed to infer device type"  # vllm's CLI without a GPU, when VLLM_TARGET_DEVICE is not cpu


@dataclass(frozen=True)
class Expected:
    """What an image should be: from the build plan (a variant) or from its own labels (an image)."""

    platform: Platform
    files: tuple[lbl.FileLabel, ...]
    site_packages: str
    labels: Mapping[str, str] | None = None  # exact labels to compare, when a plan is known
    smoke: SmokeSpec | None = None
    variant: str | None = None
    base_ref: str = ""  # what it was built on (the plan's base, or the base.name label)
    base_id: str | None = None  # the base's image id, when a plan resolved it
    layers: tuple[str, ...] = ()  # imgbuild's layers (their names in imgbuild.layers), bottom first
    env: tuple[tuple[str, str], ...] | None = None  # the variant's ENV; None: read from the imgbuild.config label
    importers: Callable[[], Sequence[str]] | None = None  # the release's modules importing the planned files


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
    return classify_digest(None if data is None else hashlib.sha256(data).hexdigest(), f)


def classify_digest(digest: str | None, f: lbl.FileLabel) -> tuple[str, str | None]:
    if digest is None:
        return "absent", None
    if digest == f.sha256:
        return f.state, digest
    if digest == f.pristine_sha256:
        return "original", digest
    return "other", digest


def _paths(expected: Expected) -> tuple[str, ...]:
    return probe.job_paths(expected.site_packages, [f.path for f in expected.files])


def _row(f: lbl.FileLabel, state: tuple[str, str | None]) -> FileRow:
    return FileRow(f.path, f.state, state[0], f.sha256, state[1])


def file_rows(engine: Engine, ref: str, expected: Expected) -> list[FileRow]:
    """The planned files read from a created, never started, container (no emulation needed)."""
    paths = _paths(expected)
    data = engine.read_files(ref, paths, expected.platform) if paths else {}
    return [_row(f, classify(data[p], f)) for f, p in zip(expected.files, paths, strict=True)]


def probed_rows(result: probe.ProbeResult, expected: Expected) -> list[FileRow]:
    """The planned files as the probe hashed them in the running image."""
    paths = _paths(expected)
    return [_row(f, classify_digest(result.hashes.get(p), f)) for f, p in zip(expected.files, paths, strict=True)]


def config_checks(info: ImageInfo, expected: Expected) -> list[Check]:
    checks = []
    arch = expected.platform.arch
    ok = info.os == "linux" and info.arch == arch
    checks.append(
        Check("config", "platform", "pass" if ok else "fail", f"image is {info.platform}, declared {expected.platform}")
    )
    for name, value in (("entrypoint", info.entrypoint), ("cmd", info.cmd)):
        if name == "entrypoint" and value and info.labels.get(lbl.ENTRYPOINT) == "keep":
            detail = f"{list(value)} kept (image.entrypoint: keep); the launcher check runs a command through it"
            checks.append(Check("config", name, "pass", detail))
            continue
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


def integrity_checks(engine: Engine, info: ImageInfo, expected: Expected) -> list[Check]:
    """Layers: the base's then imgbuild's, by diff id; ENV and labels: the plan's (or the imgbuild.config label's)."""
    ref = integrity.reference(engine, expected.base_ref, expected.base_id, len(expected.layers), info.platform)
    return [_check(c) for c in integrity_results(info, expected, ref)]


def _check(result: tuple[str, str, str]) -> Check:
    name, status, detail = result
    return Check("config", name, status, detail)


def integrity_results(info: ImageInfo, expected: Expected, ref: integrity.Reference) -> list[tuple[str, str, str]]:
    """(check name, status, detail) for the layers, ENV and labels (pure, given the reference read)."""
    out = []
    base = ref.base
    where = f"base {ref.base_ref or '(unnamed)'} is not in the local store for {info.platform}"
    if base is None:
        out.append(("layers", "skip", f"{where}; layers not compared"))
    else:
        problems = integrity.layer_problems(info.layers, base.layers, ref.own)
        text = integrity.describe(ref)
        out.append(("layers", "fail" if problems else "pass", "; ".join(problems) or text))
    config: lbl.ConfigLabel | None = None
    if expected.env is None or expected.labels is None:
        raw = info.labels.get(lbl.CONFIG)
        try:
            config = lbl.parse_config(raw) if raw else None
        except ValueError as exc:
            out.append(("env", "fail", f"unreadable {lbl.CONFIG} label: {exc}"))
            return out
        if config is None:
            out.append(("env", "skip", f"no {lbl.CONFIG} label (built by an older imgbuild) and no plan"))
            return out
    env = dict(expected.env) if expected.env is not None else (config.env if config else {})
    if base is None:  # each planned variable at least
        have = dict(e.partition("=")[::2] for e in info.env)
        wrong = [f"ENV {k}: image has {have.get(k)!r}, plan says {v!r}" for k, v in env.items() if have.get(k) != v]
        out.append(("env", "fail" if wrong else "pass", "; ".join(wrong) or f"{len(env)} planned variables ({where})"))
    else:
        problems = integrity.env_problems(info.env, integrity.expected_env(base.env, env))
        out.append(("env", "fail" if problems else "pass", "; ".join(problems) or f"base ENV + {len(env)} planned"))
    if expected.labels is not None:
        if base is None:
            return out  # labels-match-plan compares the plan's keys
        problems = integrity.label_problems(info.labels, {**base.labels, **expected.labels})
        out.append(
            ("labels", "fail" if problems else "pass", "; ".join(problems) or "exactly the base's and the plan's")
        )
    elif config is not None:
        problems = integrity.config_label_problems(info.labels, config, base.labels if base else None)
        ok = f"{len(config.labels)} labels as imgbuild wrote them" + ("" if base else " (extra keys not checked)")
        out.append(("labels", "fail" if problems else "pass", "; ".join(problems) or ok))
    return out


def run_options(info: ImageInfo, engine_arch: Platform) -> runtime_run.RunOptions:
    """What `docker run` of `info` needs on this daemon: under qemu, an arm64 torch needs an aarch64 cpuinfo."""
    return runtime_run.runtime_run_options(info.platform, cache_dir(), emulated=info.arch != engine_arch.arch)


def _probe_job(expected: Expected, skeleton: bool) -> probe.Job:
    spec = expected.smoke
    commands = () if spec is None else tuple(spec.skeleton_commands if skeleton else spec.commands)
    modules: tuple[str, ...] = ()
    cli = ""
    if not skeleton:
        importers = list(expected.importers()) if expected.importers else []
        modules = tuple(modules_to_import([f.path for f in expected.files], importers))
        cli = CLI if modules else ""
    return probe.Job(_paths(expected), commands, spec.timeout if spec else 600, modules, cli)


def runtime_checks(
    engine: Engine, ref: str, info: ImageInfo, expected: Expected
) -> tuple[list[Check], probe.ProbeResult]:
    """One container: run directly, hashes, byte-compiles, smoke commands, imports, version."""
    check_binfmt(info.platform, engine.arch)
    skeleton = lbl.SKELETON in info.labels
    job = _probe_job(expected, skeleton)
    t0 = time.monotonic()
    opts = run_options(info, engine.arch)
    res = engine.run(
        ref,
        job.argv(),
        platform=expected.platform,
        timeout=job.container_timeout,
        binds=opts.binds,
        environment=opts.env,
    )
    took = time.monotonic() - t0
    _exec_format(res.stderr, info.platform, engine.arch)
    result = probe.parse(res.stdout)
    checks = []
    if not result.ran:
        why: list[str] = [probe.last_line(res.stderr, res.stdout) or f"exit {res.exit_code}"]
        if info.entrypoint:
            why.append(f"ENTRYPOINT {list(info.entrypoint)} swallowed the command")
        checks.append(Check("runtime", "run-directly", "fail", "; ".join(why), took))
    else:
        checks.append(Check("runtime", "run-directly", "pass", f"python {result.python}", took))
    for f, path in zip(expected.files, job.paths, strict=True):
        ok, reason = result.compiles.get(path, (False, "not run"))
        checks.append(Check("runtime", f"compile {f.path}", "pass" if ok else "fail", reason or "byte-compiles"))
    checks.extend(_command_checks(expected, skeleton, result, res.exit_code))
    planned = modules_to_import([f.path for f in expected.files], [])
    checks.extend(_import_checks(job, planned, skeleton, result, res))
    return checks, result


def _died(res: RunResult) -> str:
    if res.timed_out:
        return "the probe timed out"
    tail = probe.last_line(res.stderr)
    return f"the probe stopped (exit {res.exit_code})" + (f": {tail}" if tail else "")


def _command_checks(expected: Expected, skeleton: bool, result: probe.ProbeResult, exit_code: int) -> list[Check]:
    spec = expected.smoke
    if spec is None:
        return []
    checks = [Check("command", cmd, "skip", SKELETON_SKIP) for cmd in (spec.commands if skeleton else ())]
    for cmd in spec.skeleton_commands if skeleton else spec.commands:
        r = result.commands.get(cmd)
        if r is None:
            checks.append(Check("command", cmd, "fail", "not run" + ("" if result.ran else f" (exit {exit_code})")))
        elif r.timed_out:
            checks.append(Check("command", cmd, "fail", f"timed out after {spec.timeout}s"))
        elif r.exit_code != 0:
            checks.append(Check("command", cmd, "fail", f"exit {r.exit_code}: {probe.last_line(r.stderr, r.stdout)}"))
        else:
            checks.append(Check("command", cmd, "pass", "exit 0"))
    return checks


def _import_checks(
    job: probe.Job, planned: Sequence[str], skeleton: bool, result: probe.ProbeResult, res: RunResult
) -> list[Check]:
    """One check per module of `job`; `planned`: the planned files' own modules (any failure of theirs fails)."""
    if skeleton:
        return [Check("import", "imports", "skip", f"{SKELETON_SKIP}: the planned modules, their importers and "
                      f"`{CLI} --version`")]  # fmt: skip
    checks = []
    stopped = False
    for module in job.modules:
        r = result.imports.get(module)
        if r is not None:
            detail = "imports" if r.ok else f"{r.error}" + (f" (raised at {r.where})" if r.where else "")
            status = "pass" if r.ok else "fail"
            if not r.ok and module not in planned and not r.involves(job.paths, planned):
                # a module of the release that fails on this base by itself (a ROCm or XPU model on a CPU base)
                status, detail = "skip", f"fails on this base without a planned file involved: {detail}"
            checks.append(Check("import", f"import {module}", status, detail))
        elif result.importing == module:
            checks.append(Check("import", f"import {module}", "fail", f"{_died(res)} while importing it"))
            stopped = True
        else:
            why = "not run: the probe stopped before it" if stopped or result.ran else "not run"
            checks.append(Check("import", f"import {module}", "fail", why))
    if job.cli:
        name, v = f"{job.cli} --version", result.cli
        if v is None:
            checks.append(Check("import", name, "fail", "not run" + ("" if result.ran else f": {_died(res)}")))
        elif v.exit_code != 0 and NO_DEVICE in v.stderr:
            checks.append(Check("import", name, "skip", f"needs a GPU here: {probe.last_line(v.stderr)}"))
        elif v.exit_code != 0:
            checks.append(Check("import", name, "fail", f"exit {v.exit_code}: {probe.last_line(v.stderr, v.stdout)}"))
        else:
            checks.append(Check("import", name, "pass", probe.last_line(v.stdout) or "exit 0"))
    return checks


def _exec_format(stderr: str, platform: Platform, daemon: Platform) -> None:
    if "exec format error" in stderr:
        raise DockerError(
            f"{platform} binaries do not run on this {daemon} daemon (exec format error)",
            hint=BINFMT_FIX.format(qemu=platform.qemu),
        )


def _file_checks(rows: Sequence[FileRow], took: float) -> list[Check]:
    checks = []
    for row in rows:
        status = "pass" if row.ok else "fail"
        detail = (
            f"{row.actual}" if row.ok else f"expected {row.expected} {row.expected_sha256[:12]}, image has {row.actual}"
        )
        if row.actual_sha256 and not row.ok:
            detail += f" {row.actual_sha256[:12]}"
        checks.append(Check("files", row.path, status, detail, took / max(len(rows), 1)))
    return checks


def smoke(engine: Engine, ref: str, expected: Expected, *, runtime: bool = True) -> SmokeReport:
    """Run every check on `ref`; a failing check is recorded, never raised.

    With `runtime`, one container does everything that runs; the file hashes
    come from it too, unless it could not run (then they are read without running).
    """
    info = engine.require(ref)
    report = SmokeReport(ref, info.id, expected.variant, str(expected.platform))
    report.checks.extend(config_checks(info, expected))
    report.checks.extend(integrity_checks(engine, info, expected))
    run_checks: list[Check] = []
    t0 = time.monotonic()
    if runtime:
        run_checks, result = runtime_checks(engine, info.id, info, expected)
        # what sparkrun needs: a passthrough ENTRYPOINT, a standalone kill
        run_checks += [Check("launcher", *r) for r in launchcheck.run(engine, info, expected.platform)]
        report.files = probed_rows(result, expected) if result.ran else file_rows(engine, info.id, expected)
    else:
        report.files = file_rows(engine, info.id, expected)
    report.checks.extend(_file_checks(report.files, 0.0 if runtime else time.monotonic() - t0))
    report.checks.extend(run_checks)
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
    try:
        layers = tuple(str(d) for d in json.loads(info.labels.get(f"{lbl.PREFIX}layers") or "[]"))
    except (ValueError, TypeError) as exc:
        raise DockerError(f"image {info.id[:19]}: unreadable imgbuild.layers label: {exc}") from exc
    return Expected(
        platform=info.platform,
        files=files,
        site_packages=info.labels.get(f"{lbl.PREFIX}site-packages", ""),
        smoke=smoke_spec,
        variant=info.labels.get(f"{lbl.PREFIX}variant"),
        base_ref=info.labels.get(f"{lbl.OCI}base.name", ""),
        layers=layers,
    )


def summary(reports: Sequence[SmokeReport]) -> str:
    total = sum(len(r.checks) for r in reports)
    failed = sum(len(r.failures) for r in reports)
    skipped = sum(1 for r in reports for c in r.checks if c.status == "skip")
    return f"{total - failed - skipped} passed, {failed} failed, {skipped} skipped"
