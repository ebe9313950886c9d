"""The smoke probe: runs INSIDE the image as `python3 -c` (maybe python3-minimal: no json; few imports under
qemu). smoke/probe.py reads its lines.

The planned modules are imported in this process; the rest (the release's modules importing them) are shared
between this process and forked workers (one per CPU, at most the job's number), which start from the planned
modules imported, as one process importing them all would. Each line is one write; while workers run, only import lines
are written, each at most LINE bytes, so the lines of several processes on one pipe never mix (a pipe write of at
most PIPE_BUF bytes is atomic: 4096 on Linux)."""

import os
import sys

try:  # the built-in sha256 (3.12: _sha2; 3.11: _sha256): hashlib loads OpenSSL (~0.1 s under qemu)
    from _sha2 import sha256  # type: ignore[import-not-found]
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import sha256


LINE = 4000


def out(*rec: object) -> None:
    line = ("imgbuild-probe " + repr(rec) + "\n").encode()
    while line:
        line = line[os.write(1, line) :]


PYC_MODES = {0: "timestamp", 1: "unchecked-hash", 3: "checked-hash"}  # the .pyc header's flags (PEP 552)


def loads(path: str, code: object) -> tuple[bool, str]:
    """Whether the code this interpreter's import system would run for `path` is `code` (the file compiled): the
    loader's answer, which takes a .pyc in __pycache__ over the file where the .pyc's header says so (an
    unchecked-hash .pyc is never checked against the file). Nothing is executed or written."""
    import importlib.machinery
    import importlib.util

    sys.dont_write_bytecode = True
    try:
        loaded = importlib.machinery.SourceFileLoader("imgbuild_probe", path).get_code("imgbuild_probe")
    except Exception as e:  # noqa: BLE001 (a loader that fails is the result to report)
        return False, "the loader failed: " + type(e).__name__ + " " + str(e).replace("\n", " ")[:300]
    pyc = importlib.util.cache_from_source(path)
    try:
        with open(pyc, "rb") as f:
            flags = int.from_bytes(f.read(8)[4:8], "little")
        cached = os.path.relpath(pyc, os.path.dirname(path)) + " (" + PYC_MODES.get(flags, "flags " + str(flags)) + ")"
    except OSError:
        cached = ""
    if loaded == code:
        return True, ("from " + cached) if cached else "from the file (no .pyc)"
    return False, "the interpreter would run " + (cached or "other code") + ", not this file's code"


# The host wrote the job with repr() (ast.literal_eval would cost ~0.15 s to import under qemu).
paths, commands, timeout, modules, split, most, cli = eval(sys.argv[1], {"__builtins__": {}})
out("python", sys.version.split()[0])
for p in paths:
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as e:
        out("file", p, None, type(e).__name__)
        out("compile", p, False, type(e).__name__ + " " + str(e)[:300])
        continue
    out("file", p, sha256(data).hexdigest(), "")
    try:
        own = compile(data, p, "exec", dont_inherit=True)
        out("compile", p, True, "")
    except Exception as e:  # noqa: BLE001 (any failure to compile is the result to report)
        out("compile", p, False, type(e).__name__ + " " + str(e).replace("\n", " ")[:300])
        continue
    out("loads", p, *loads(p, own))


def cut(data: bytes) -> str:
    return data.decode(errors="replace")[-2000:]


def run(kind: str, cmd: str) -> None:
    import subprocess  # only for shell commands (~0.2 s under qemu)

    try:
        r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, timeout=timeout)
        out(kind, cmd, r.returncode, False, cut(r.stdout), cut(r.stderr))
    except subprocess.TimeoutExpired:
        out(kind, cmd, -1, True, "", "")


for c in commands:
    run("command", c)


def attempt(m: str) -> None:
    import importlib
    import traceback

    out("import-start", m)
    try:
        importlib.import_module(m)
        out("import", m, True, "", "", [])
    except BaseException as e:  # noqa: BLE001 (an import that fails in any way, SystemExit too, is reported)
        where = ""
        tb = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")]
        files = sorted(set(f.filename for f in tb))
        if isinstance(e, SyntaxError) and e.filename:
            where = f"{e.filename}:{e.lineno}"
            files.append(e.filename)
        elif tb:
            where = f"{tb[-1].filename}:{tb[-1].lineno}"
        error = type(e).__name__ + ": " + str(e).replace("\n", " ")[:300]
        while files and len(repr((m, error, where, files)).encode()) > LINE - 40:  # as many files as fit a line
            files.pop()
        out("import", m, False, error, where, files)


def fork(share: list[str]) -> int:
    """A worker importing `share`, or 0 where none could be forked (this process imports it then)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        return 0
    if pid == 0:  # the worker: its lines, then out without the interpreter's teardown
        try:
            for m in share:
                attempt(m)
        finally:
            os._exit(0)
    return pid


for m in modules[:split]:
    attempt(m)
rest = modules[split:]
if rest:  # python 3.12+ warns on stderr that a fork with native threads alive may deadlock: these threads (BLAS
    # pools, started at import) wait idle, holding no lock the worker needs
    import warnings

    warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)
n = max(1, min(most, len(rest), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))
workers = []
for k in range(1, n):
    pid = fork(rest[k::n])
    if pid:
        workers.append((pid, rest[k::n]))
    else:
        for m in rest[k::n]:
            attempt(m)
for m in rest[0::n]:
    attempt(m)
if cli:
    # `CLI --version` run as its console script would run it (on PATH, its entry point's function), but in
    # this process: a second python would import vllm again, as long as all of the imports above.
    try:
        import contextlib
        import io
        import shutil
        from importlib.metadata import entry_points

        if shutil.which(cli) is None:
            raise LookupError(cli + " is not on PATH")
        found = list(entry_points(group="console_scripts", name=cli))
        if not found:
            raise LookupError("no console_scripts entry point named " + cli)
        main = found[0].load()
        sys.argv = [cli, "--version"]
        printed, errors, code = io.StringIO(), io.StringIO(), 0
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
            try:
                main()
            except SystemExit as e:  # argparse's version action exits 0
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        version = ("cli", cli, code, False, cut(printed.getvalue().encode()), cut(errors.getvalue().encode()))
    except BaseException as e:  # noqa: BLE001 (any failure is the result to report)
        version = ("cli", cli, 1, False, "", type(e).__name__ + ": " + str(e).replace("\n", " ")[:300])
for pid, share in workers:
    _, status = os.waitpid(pid, 0)
    if status:  # killed, or exited other than through os._exit(0)
        why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        out("worker-died", why, share)
if cli:
    out(*version)  # after the workers: it may be longer than one atomic write
# Every result is written: out without the interpreter's teardown, which after torch and vllm takes seconds
# (benchmarks/results/issue34-smoke-workers.txt) and proves nothing about the image.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
