"""Smoke tests of a built image: its config (platform, ENTRYPOINT/CMD, labels, layers, ENV), its files' sha256,
then one container running probe.py's program and launchcheck.py's checks (skeleton bases: `skeleton_commands`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from imgbuild.cache import cache_dir
from imgbuild.config.models import SmokeSpec
from imgbuild.engine import BINFMT_FIX, Engine, ImageInfo, RunResult, check_binfmt
from imgbuild.errors import DockerError
from imgbuild.plan import labels as lbl
from imgbuild.platforms import Platform
from imgbuild.smoke import launchcheck, probe, record, runtime_run
from imgbuild.smoke.importcheck import modules_to_import
from imgbuild.smoke.report import Check, FileState, SmokeReport, Status

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

    @property
    def paths(self) -> tuple[str, ...]:
        """The planned files' absolute paths in the image."""
        return tuple(f"{self.site_packages.rstrip('/')}/{f.path}" for f in self.files)


# -- integrity: is the image exactly what imgbuild built (an image edited after the build keeps its labels) --
NOTED = 3  # differences named per check; the rest are counted


def _short(diff_id: str | None) -> str:
    return "?" if diff_id is None else diff_id.removeprefix("sha256:")[:12]


def cut(value: str | None, n: int = 60) -> str:
    """`value` for a message: quoted, at most `n` characters."""
    if value is None:
        return "nothing"
    return repr(value if len(value) <= n else value[:n] + "...")


def _noted(problems: list[str]) -> list[str]:
    return problems if len(problems) <= NOTED else [*problems[:NOTED], f"and {len(problems) - NOTED} more"]


def layer_problems(actual: Sequence[str], base: Sequence[str], own: int) -> list[str]:
    """Each layer where the image is not `base` followed by `own` layers of imgbuild's (any diff id)."""
    expected: list[tuple[str, str | None]] = [(f"base layer {i}", d) for i, d in enumerate(base)]
    expected += [(f"imgbuild layer {j}", None) for j in range(own)]
    problems = []
    for i in range(max(len(actual), len(expected))):
        if i >= len(expected):
            problems.append(
                f"layer {i} ({_short(actual[i])}) is neither the base's nor imgbuild's "
                "(added after the build: a `docker commit` or a later RUN/COPY?)"
            )
        elif i >= len(actual):
            problems.append(f"layer {i} missing: expected {expected[i][0]} {_short(expected[i][1])}")
        elif expected[i][1] is not None and expected[i][1] != actual[i]:
            problems.append(
                f"layer {i}: expected {expected[i][0]} {_short(expected[i][1])}, image has {_short(actual[i])}"
            )
    return _noted(problems)


def env_dict(entries: Sequence[str]) -> dict[str, str]:
    """An image's ENV (`KEY=value` entries) as a dict."""
    return dict(e.partition("=")[::2] for e in entries)


def exact(what: str, have: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """Each key where `have` is not exactly `expected`: every key with its value, and no other key."""
    problems = []
    for key in sorted(set(have) | set(expected)):
        if key not in have:
            problems.append(f"{what} {key}: missing, plan says {cut(expected[key])}")
        elif key not in expected:
            problems.append(f"{what} {key}={cut(have[key])}: not in the plan (nor the base)")
        elif have[key] != expected[key]:
            problems.append(f"{what} {key}: image has {cut(have[key])}, plan says {cut(expected[key])}")
    return _noted(problems)


def config_label_problems(
    actual: Mapping[str, str], config: lbl.ConfigLabel, base: Mapping[str, str] | None
) -> list[str]:
    """Labels against the `imgbuild.config` label (no plan at hand); extra keys only when the base is known."""
    problems = []
    for key in sorted(config.labels):
        if key not in actual:
            problems.append(f"label {key}: missing (imgbuild set it)")
        elif not config.matches(key, actual[key]):
            problems.append(
                f"label {key}: changed after the build (imgbuild wrote sha256 {config.labels[key]}..., "
                f"image has {cut(actual[key])})"
            )
    if base is not None:
        for key in sorted(set(actual) - set(config.labels) - {lbl.INPUTS, lbl.CONFIG}):
            if key not in base:
                problems.append(f"label {key}={cut(actual[key])}: set by neither imgbuild nor the base")
            elif base[key] != actual[key]:
                problems.append(f"label {key}: image has {cut(actual[key])}, the base {cut(base[key])}")
    return _noted(problems)


def find_base(engine: Engine, base_ref: str, base_id: str | None, platform: Platform) -> ImageInfo | None:
    """The base (by id when known, else by name), when it is in the store for `platform`."""
    base = (engine.image(base_id) if base_id else None) or (engine.image(base_ref) if base_ref else None)
    return base if base is not None and base.platform == platform else None


def file_rows(expected: Expected, digests: Mapping[str, str | None]) -> list[FileState]:
    """Each planned file's state in the image, from the sha256 of what the image holds at its path."""
    rows = []
    for f, path in zip(expected.files, expected.paths, strict=True):
        digest = digests.get(path)
        if digest is None:
            state = "absent"
        elif digest == f.sha256:
            state = f.state
        else:
            state = "original" if digest == f.pristine_sha256 else "other"
        rows.append(FileState(f.path, f.state, state, f.sha256, digest))
    return rows


def read_digests(engine: Engine, ref: str, expected: Expected) -> dict[str, str | None]:
    """The planned files' sha256, read from a created, never started, container (no emulation needed)."""
    return engine.file_digests(ref, expected.paths, expected.platform) if expected.files else {}


def _verdict(name: str, problems: Sequence[str], ok: str) -> Check:
    """A config check that fails naming each problem, or passes saying `ok`."""
    return Check("config", name, "fail" if problems else "pass", "; ".join(problems) or ok)


def config_checks(info: ImageInfo, expected: Expected) -> list[Check]:
    ok = info.os == "linux" and info.arch == expected.platform.arch
    detail = f"image is {info.platform}, declared {expected.platform}"
    checks = [Check("config", "platform", "pass" if ok else "fail", detail)]
    for name, value in (("entrypoint", info.entrypoint), ("cmd", info.cmd)):
        if name == "entrypoint" and value and info.labels.get(lbl.ENTRYPOINT) == "keep":
            detail = f"{list(value)} kept (image.entrypoint: keep); the launcher check runs a command through it"
            checks.append(Check("config", name, "pass", detail))
        else:
            wrong = [f"{name.upper()} is {list(value)}; launchers append their own command"] if value else []
            checks.append(_verdict(name, wrong, "empty"))
    missing = lbl.missing_required(info.labels)
    detail = f"missing: {', '.join(missing)}" if missing else f"{len(lbl.REQUIRED)} required labels"
    checks.append(Check("config", "labels-present", "fail" if missing else "pass", detail))
    if expected.labels is not None:
        wrong = [
            f"{k}: image has {cut(info.labels.get(k), 80)}, plan says {cut(v, 80)}"
            for k, v in expected.labels.items()
            if info.labels.get(k) != v
        ]
        checks.append(_verdict("labels-match-plan", wrong, "all labels agree"))
    return checks


def integrity_checks(info: ImageInfo, expected: Expected, base: ImageInfo | None) -> list[Check]:
    """The layers, ENV and labels against the base and the plan (or the imgbuild.config label); pure."""
    out = []
    where = f"base {expected.base_ref or '(unnamed)'} is not in the local store for {info.platform}"
    if base is None:
        out.append(Check("config", "layers", "skip", f"{where}; layers not compared"))
    else:
        own = len(expected.layers)
        ok = f"{len(base.layers)} base + {own} imgbuild layer{'s' if own != 1 else ''}"
        out.append(_verdict("layers", layer_problems(info.layers, base.layers, own), ok))
    config: lbl.ConfigLabel | None = None
    if expected.env is None or expected.labels is None:
        raw = info.labels.get(lbl.CONFIG)
        try:
            config = lbl.parse_config(raw) if raw else None
        except ValueError as exc:
            return [*out, Check("config", "env", "fail", f"unreadable {lbl.CONFIG} label: {exc}")]
        if config is None:
            why = f"no {lbl.CONFIG} label (built by an older imgbuild) and no plan"
            return [*out, Check("config", "env", "skip", why)]
    env = dict(expected.env) if expected.env is not None else (config.env if config else {})
    have = env_dict(info.env)
    if base is None:  # each planned variable at least
        wrong = exact("ENV", {k: have[k] for k in env if k in have}, env)
        out.append(_verdict("env", wrong, f"{len(env)} planned variables ({where})"))
    else:  # the base's ENV with the variant's set over it (as Dockerfile `ENV` does)
        wrong = exact("ENV", have, {**env_dict(base.env), **env})
        out.append(_verdict("env", wrong, f"base ENV + {len(env)} planned"))
    if expected.labels is not None and base is not None:  # without the base, labels-match-plan compares the plan's
        problems = exact("label", info.labels, {**base.labels, **expected.labels})
        out.append(_verdict("labels", problems, "exactly the base's and the plan's"))
    elif expected.labels is None and config is not None:
        problems = config_label_problems(info.labels, config, base.labels if base else None)
        ok = f"{len(config.labels)} labels as imgbuild wrote them" + ("" if base else " (extra keys not checked)")
        out.append(_verdict("labels", problems, ok))
    return out


def runtime_checks(
    engine: Engine, info: ImageInfo, expected: Expected
) -> tuple[list[Check], probe.ProbeResult, list[launchcheck.Result]]:
    """One container: the launcher's `bash -c` (entrypoint, a standalone kill), then in the same shell the probe:
    run directly, hashes, byte-compiles, smoke commands, imports, version. Only when `bash -c` did not run there
    (no bash, a consuming ENTRYPOINT) the probe runs again as `python3 -c`, and launchcheck its cleared run."""
    check_binfmt(info.platform, engine.platform)
    skeleton, spec = lbl.SKELETON in info.labels, expected.smoke
    commands = () if spec is None else tuple(spec.skeleton_commands if skeleton else spec.commands)
    files = [f.path for f in expected.files]
    planned, modules = modules_to_import(files, []), tuple[str, ...]()
    if not skeleton:  # the planned files' modules, then the release's modules importing them (shared by workers)
        modules = tuple(modules_to_import(files, list(expected.importers()) if expected.importers else []))
    timeout = spec.timeout if spec else 600
    job = probe.Job(expected.paths, commands, timeout, modules, CLI if modules else "", split=len(planned))
    t0 = time.monotonic()
    # under qemu, an arm64 torch needs an aarch64 cpuinfo
    opts = runtime_run.runtime_run_options(info.platform, cache_dir(), emulated=info.arch != engine.platform.arch)
    res = engine.run(info.id, job.under_bash(launchcheck.SCRIPT), platform=expected.platform,
                     timeout=job.container_timeout, binds=opts.binds, environment=opts.env)  # fmt: skip
    launched = launchcheck.parse(res.stdout)
    if launched.ran:
        launcher = launchcheck.results(info.entrypoint, launched, None)
    else:
        t0 = time.monotonic()
        res = engine.run(info.id, job.argv(), platform=expected.platform, timeout=job.container_timeout,
                         binds=opts.binds, environment=opts.env)  # fmt: skip
        launcher = launchcheck.run(engine, info, expected.platform)
    took = time.monotonic() - t0
    if "exec format error" in res.stderr:
        raise DockerError(
            f"{info.platform} binaries do not run on this {engine.platform} daemon (exec format error)",
            hint=BINFMT_FIX.format(qemu=info.platform.machine),
        )
    result = probe.parse(res.stdout)
    if result.ran:
        checks = [Check("runtime", "run-directly", "pass", f"python {result.python}", took)]
    else:
        why = [probe.last_line(res.stderr, res.stdout) or f"exit {res.exit_code}"]
        if info.entrypoint:
            why.append(f"ENTRYPOINT {list(info.entrypoint)} swallowed the command")
        checks = [Check("runtime", "run-directly", "fail", "; ".join(why), took)]
    for f, path in zip(expected.files, job.paths, strict=True):
        ok, reason = result.compiles.get(path, (False, "not run"))
        checks.append(Check("runtime", f"compile {f.path}", "pass" if ok else "fail", reason or "byte-compiles"))
        if ok:  # what import would run: a stale .pyc the loader trusts (unchecked-hash) runs other code
            ok, reason = result.loads.get(path, (False, "not run"))
            checks.append(Check("runtime", f"loads {f.path}", "pass" if ok else "fail", reason))
    checks.extend(_command_checks(expected.smoke, skeleton, result, res.exit_code))
    checks.extend(_import_checks(job, planned, skeleton, result, res))
    return checks, result, launcher


def _died(res: RunResult) -> str:
    if res.timed_out:
        return "the probe timed out"
    tail = probe.last_line(res.stderr)
    return f"the probe stopped (exit {res.exit_code})" + (f": {tail}" if tail else "")


def _command_checks(spec: SmokeSpec | None, skeleton: bool, result: probe.ProbeResult, exit_code: int) -> list[Check]:
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
        detail = f"{SKELETON_SKIP}: the planned modules, their importers and `{CLI} --version`"
        return [Check("import", "imports", "skip", detail)]
    checks = []
    stopped = False
    for module in job.modules:
        name = f"import {module}"
        r = result.imports.get(module)
        if r is not None:
            detail = "imports" if r.ok else r.error + (f" (raised at {r.where})" if r.where else "")
            status: Status = "pass" if r.ok else "fail"
            if not r.ok and module not in planned and not r.involves(job.paths, planned):
                # a module of the release that fails on this base by itself (a ROCm or XPU model on a CPU base)
                status, detail = "skip", f"fails on this base without a planned file involved: {detail}"
            checks.append(Check("import", name, status, detail))
        elif module in result.importing:
            died = f"a probe worker died ({result.lost[module]})" if module in result.lost else _died(res)
            checks.append(Check("import", name, "fail", f"{died} while importing it"))
            stopped = True
        elif module in result.lost:
            checks.append(Check("import", name, "fail", f"not run: its probe worker died ({result.lost[module]})"))
        else:
            why = "not run: the probe stopped before it" if stopped or result.ran else "not run"
            checks.append(Check("import", name, "fail", why))
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


def smoke(engine: Engine, ref: str, expected: Expected, *, runtime: bool = True) -> SmokeReport:
    """Run every check on `ref`; a failing check is recorded, never raised. With `runtime`, one container does
    everything that runs, and the file hashes come from it too unless it could not run."""
    info = engine.require(ref)
    checks = [*config_checks(info, expected)]
    base = find_base(engine, expected.base_ref, expected.base_id, info.platform)
    checks += integrity_checks(info, expected, base)
    run_checks: list[Check] = []
    result = None
    t0 = time.monotonic()
    if runtime:
        run_checks, result, launcher = runtime_checks(engine, info, expected)
        # what sparkrun needs: a passthrough ENTRYPOINT, a standalone kill (checked in the probe's container)
        run_checks += [Check("launcher", name, cast(Status, status), detail) for name, status, detail in launcher]
    digests = result.hashes if result is not None and result.ran else read_digests(engine, info.id, expected)
    files = file_rows(expected, digests)
    took = 0.0 if runtime else (time.monotonic() - t0) / max(len(files), 1)
    for row in files:
        detail = row.actual
        if not row.ok:
            detail = f"expected {row.expected} {row.expected_sha256[:12]}, image has {row.actual}"
            detail += f" {row.actual_sha256[:12]}" if row.actual_sha256 else ""
        checks.append(Check("files", row.path, "pass" if row.ok else "fail", detail, took))
    checks += run_checks
    report = SmokeReport(ref, info.id, expected.variant, expected.platform, checks=tuple(checks), files=tuple(files))
    if runtime:  # `history` says whether the image passed; a static check is not a smoke test
        record.record(info.id, ref, report.ok, [f"{c.group} {c.name}" for c in report.failures])
    return report


def expected_from_labels(info: ImageInfo) -> Expected:
    """What an image claims about itself (for `smoke IMAGE`)."""
    try:
        files = tuple(lbl.parse_files(info.labels.get(f"{lbl.PREFIX}files") or "{}"))
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
        variant=info.labels.get(f"{lbl.PREFIX}variant"),
        base_ref=info.labels.get(f"{lbl.OCI}base.name") or info.labels.get(lbl.BASE_LOCAL, ""),
        layers=layers,
    )


def summary(reports: Sequence[SmokeReport]) -> str:
    total = sum(len(r.checks) for r in reports)
    failed = sum(len(r.failures) for r in reports)
    skipped = sum(1 for r in reports for c in r.checks if c.status == "skip")
    return f"{total - failed - skipped} passed, {failed} failed, {skipped} skipped"
