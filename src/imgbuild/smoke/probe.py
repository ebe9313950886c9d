"""The one program smoke runs in an image, and the reading of what it prints.

One container per image and platform (each start under qemu costs ~0.6 s,
python ~0.55 s more): the probe prints the Python version, the sha256 and
byte-compile result of every planned file, runs each smoke command (exit code,
output), then imports each module asked for and runs `CLI --version` through
the console script's entry point, in the same process (no second import of vllm).

The image may only have python3-minimal (no json module), so the probe reads
its job as a Python literal and prints one `imgbuild-probe <repr(tuple)>`
line per result, flushed, so that what it printed before a crash (torch
segfaulting under qemu, say) is still read. `parse` is pure.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

MARK = "imgbuild-probe "

# The program itself runs inside the image, never on the host (so it may start processes itself):
# in_image/smoke_probe.py, shipped as a resource and passed to `python3 -c`.
PROBE = (resources.files("imgbuild.smoke") / "in_image" / "smoke_probe.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Job:
    paths: tuple[str, ...]  # absolute paths in the image
    commands: tuple[str, ...]
    timeout: int  # per command, in seconds
    modules: tuple[str, ...] = ()
    cli: str = ""  # a console script whose `--version` runs after the imports, in the probe's process

    def argv(self) -> list[str]:
        spec = (list(self.paths), list(self.commands), self.timeout, list(self.modules), self.cli)
        return ["python3", "-c", PROBE, repr(spec)]

    @property
    def container_timeout(self) -> int:
        """Every step may take `timeout`; the container as a whole gets their sum."""
        steps = 2 + len(self.commands) + (1 if self.modules else 0)
        return self.timeout * steps


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    timed_out: bool
    stdout: str
    stderr: str


@dataclass(frozen=True)
class ImportResult:
    module: str
    ok: bool
    error: str  # "ExceptionType: message"
    where: str  # file:line where it was raised
    files: tuple[str, ...] = ()  # every file of the traceback

    def involves(self, paths: Sequence[str], modules: Sequence[str]) -> bool:
        """Whether the failure passes through one of `paths` or names one of `modules`."""
        return any(p in self.files for p in paths) or any(m in self.error for m in modules)


@dataclass
class ProbeResult:
    python: str | None = None
    hashes: dict[str, str | None] = field(default_factory=dict)  # path -> sha256, None when unreadable
    compiles: dict[str, tuple[bool, str]] = field(default_factory=dict)
    commands: dict[str, CommandResult] = field(default_factory=dict)
    imports: dict[str, ImportResult] = field(default_factory=dict)
    cli: CommandResult | None = None  # `CLI --version`
    importing: str | None = None  # the module being imported when output stopped, if it never finished

    @property
    def ran(self) -> bool:
        return self.python is not None


def _command(rec: tuple[object, ...]) -> CommandResult:
    _, cmd, code, timed_out, stdout, stderr = rec
    return CommandResult(str(cmd), int(str(code)), bool(timed_out), str(stdout), str(stderr))


def parse(stdout: str) -> ProbeResult:
    """What the probe printed; lines it did not print (or that are cut off) are ignored."""
    res = ProbeResult()
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            rec = ast.literal_eval(line[len(MARK) :])
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if not isinstance(rec, tuple) or not rec:
            continue
        try:
            _record(res, rec)
        except (ValueError, TypeError):
            continue
    return res


def _record(res: ProbeResult, rec: tuple[object, ...]) -> None:
    kind = rec[0]
    if kind == "python" and len(rec) == 2:
        res.python = str(rec[1])
    elif kind == "file" and len(rec) == 4:
        res.hashes[str(rec[1])] = None if rec[2] is None else str(rec[2])
    elif kind == "compile" and len(rec) == 4:
        res.compiles[str(rec[1])] = (bool(rec[2]), str(rec[3]))
    elif kind == "command" and len(rec) == 6:
        res.commands[str(rec[1])] = _command(rec)
    elif kind == "cli" and len(rec) == 6:
        res.cli = _command(rec)
    elif kind == "import-start" and len(rec) == 2:
        res.importing = str(rec[1])
    elif kind == "import" and len(rec) == 6 and isinstance(rec[5], list):
        files = tuple(str(f) for f in rec[5])
        res.imports[str(rec[1])] = ImportResult(str(rec[1]), bool(rec[2]), str(rec[3]), str(rec[4]), files)
        res.importing = None


def last_line(*texts: str) -> str:
    """The last non-empty line of the first text that has one (how a failure is summed up)."""
    for text in texts:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        if lines:
            return lines[-1][:300]
    return ""


def job_paths(site_packages: str, files: Sequence[str]) -> tuple[str, ...]:
    site = site_packages.rstrip("/")
    return tuple(f"{site}/{f}" for f in files)
