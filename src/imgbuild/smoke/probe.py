"""The one program smoke runs in an image (in_image/smoke_probe.py) and the reading of its `imgbuild-probe` lines
(one flushed line per result, so what it printed before a crash is still read)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

MARK = "imgbuild-probe "
PROBE = (resources.files("imgbuild.smoke") / "in_image" / "smoke_probe.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Job:
    paths: tuple[str, ...]  # absolute paths in the image
    commands: tuple[str, ...]
    timeout: int  # per command, in seconds
    modules: tuple[str, ...] = ()
    cli: str = ""  # a console script whose `--version` runs after the imports, in the probe's process
    split: int | None = None  # the first `split` modules in the probe's process, the rest shared with forked
    # workers that start from those imported; None: every module in the probe's process, in order
    workers: int = 4  # processes sharing the rest at most (one per CPU the container may use)

    def argv(self) -> list[str]:
        split = len(self.modules) if self.split is None else self.split
        spec = (list(self.paths), list(self.commands), self.timeout, list(self.modules), split, self.workers, self.cli)
        return ["python3", "-c", PROBE, repr(spec)]

    def under_bash(self, script: str) -> list[str]:
        """`bash -c 'SCRIPT; exec python3 -c PROBE SPEC'`: the program after `script` in the same container, run
        the way a launcher runs its command (`IMAGE bash -c ...`, under the image's ENTRYPOINT)."""
        _, _, program, spec = self.argv()
        return ["bash", "-c", f'{script}\nexec python3 -c "$1" "$2"', "imgbuild-probe", program, spec]

    @property
    def container_timeout(self) -> int:
        """Every step may take `timeout`; the container as a whole gets their sum."""
        return self.timeout * (2 + len(self.commands) + (1 if self.modules else 0))


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    timed_out: bool
    stdout: str
    stderr: str


@dataclass(frozen=True)
class ImportResult:
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
    loads: dict[str, tuple[bool, str]] = field(default_factory=dict)  # path -> whether import runs the file's code
    commands: dict[str, CommandResult] = field(default_factory=dict)
    imports: dict[str, ImportResult] = field(default_factory=dict)
    cli: CommandResult | None = None  # `CLI --version`
    importing: set[str] = field(default_factory=set)  # modules whose import started and never finished
    lost: dict[str, str] = field(default_factory=dict)  # module -> how the worker importing it died

    @property
    def ran(self) -> bool:
        return self.python is not None


def parse(stdout: str) -> ProbeResult:
    """What the probe printed; lines it did not print (or that are cut off) are ignored."""
    res = ProbeResult()
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            rec = ast.literal_eval(line[len(MARK) :])
            kind, name, *rest = rec
            name = str(name)
            if kind == "python":
                res.python = name
            elif kind == "file":
                res.hashes[name] = None if rest[0] is None else str(rest[0])
            elif kind == "compile":
                res.compiles[name] = (bool(rest[0]), str(rest[1]))
            elif kind == "loads":
                res.loads[name] = (bool(rest[0]), str(rest[1]))
            elif kind in ("command", "cli"):
                code, timed_out, out, err = rest
                result = CommandResult(int(code), bool(timed_out), str(out), str(err))
                if kind == "cli":
                    res.cli = result
                else:
                    res.commands[name] = result
            elif kind == "import-start":
                res.importing.add(name)
            elif kind == "import":
                ok, error, where, files = rest
                res.imports[name] = ImportResult(bool(ok), str(error), str(where), tuple(map(str, files)))
                res.importing.discard(name)
            elif kind == "worker-died":
                res.lost.update((str(m), name) for m in rest[0])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, IndexError):
            continue  # a line cut off, or not the probe's
    return res


def last_line(*texts: str) -> str:
    """The last non-empty line of the first text that has one (how a failure is summed up)."""
    for text in texts:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        if lines:
            return lines[-1][:300]
    return ""
