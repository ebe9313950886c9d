"""The smoke probe: this program runs INSIDE the image (`python3 -c`), never on the host.

images/probe.py reads it as text, passes it with its job, and parses the
`imgbuild-probe <repr(tuple)>` lines it prints. The image may have only
python3-minimal: no json, no typing; so the job is a Python literal.
It starts the smoke commands itself (inside the container); the host's
processes all go through imgbuild/proc.py.

Under qemu every module costs: ast, hashlib, subprocess and traceback took
~0.4 s together and a second interpreter ~0.55 s more. So the probe imports
only built-in modules until its commands have run, and a command that is
exactly `python3 -c CODE` (the host says which: probe.fork_code) runs in a
fork of this interpreter, as `python3 -c` would run it (run_forked).
"""

import os
import sys

# The names a fresh `python3 -c` starts with, before this program adds its own.
FRESH_MODULES = set(sys.modules)
FRESH_MAIN = {k: globals()[k] for k in ("__name__", "__doc__", "__package__", "__loader__", "__spec__")}

try:  # the built-in sha256 (3.12: _sha2; 3.11: _sha256): hashlib would load OpenSSL (~0.1 s under qemu)
    from _sha2 import sha256  # type: ignore[import-not-found]
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import sha256


def out(*rec: object) -> None:
    print("imgbuild-probe", repr(rec), flush=True)


# The host wrote the job with repr() (ast.literal_eval would cost ~0.15 s to import under qemu).
paths, commands, timeout, modules, version = eval(sys.argv[1], {"__builtins__": {}})
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
        compile(data, p, "exec", dont_inherit=True)
        out("compile", p, True, "")
    except Exception as e:  # noqa: BLE001 (any failure to compile is the result to report)
        out("compile", p, False, type(e).__name__ + " " + str(e).replace("\n", " ")[:300])


def cut(data: bytes) -> str:
    return data.decode(errors="replace")[-2000:]


def run(kind: str, cmd: str) -> None:
    import subprocess  # only for shell commands (~0.2 s under qemu)

    try:
        r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, timeout=timeout)
        out(kind, cmd, r.returncode, False, cut(r.stdout), cut(r.stderr))
    except subprocess.TimeoutExpired:
        out(kind, cmd, -1, True, "", "")


def same_python() -> bool:
    """Whether `python3` on PATH, the one /bin/sh would start, is this interpreter.

    By path, not by the file it links to: a venv's python3 links to the system one, yet is not it.
    """
    for d in os.environ.get("PATH", "").split(":"):
        exe = os.path.join(d or ".", "python3")
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            return os.path.abspath(exe) == os.path.abspath(sys.executable)
    return False


def child(code: str, out_w: int, err_w: int) -> None:
    """In the fork: become a fresh `python3 -c CODE` (argv, __main__, sys.modules, PWD as sh sets it) and run it."""
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
    for m in set(sys.modules) - FRESH_MODULES:
        del sys.modules[m]
    sys.argv[:] = ["-c"]
    pwd = os.environ.get("PWD", "")
    try:
        keep = pwd.startswith("/") and os.path.samefile(pwd, ".")
    except OSError:
        keep = False
    if not keep:
        os.environ["PWD"] = os.getcwd()
    main = type(sys)("__main__")
    main.__dict__.update(FRESH_MAIN, __doc__=None, __annotations__={}, __builtins__=__builtins__)
    sys.modules["__main__"] = main
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
    except SystemExit:
        raise  # the interpreter ends it as `python3 -c` would: exit code, message, atexit
    except BaseException as e:  # noqa: BLE001 (uncaught in CODE: python prints it and exits 1)
        tb = e.__traceback__
        e = e.with_traceback(tb.tb_next if tb else None)  # without this frame: as if CODE were the top
        sys.excepthook(type(e), e, e.__traceback__)
        # python kills itself with SIGINT on an uncaught KeyboardInterrupt: /bin/sh says 130, and nothing
        raise SystemExit(130 if isinstance(e, KeyboardInterrupt) else 1) from None
    raise SystemExit(0)


def shell_status(status: int) -> tuple[int, bytes]:
    """The exit code and message /bin/sh (dash) gives for its child's wait status."""
    if not os.WIFSIGNALED(status):
        return os.waitstatus_to_exitcode(status), b""
    sig = os.WTERMSIG(status)
    if sig in (2, 13):  # dash says nothing for SIGINT and SIGPIPE
        return 128 + sig, b""
    import signal  # only here: it imports enum

    text = signal.strsignal(sig) or f"Signal {sig}"
    return 128 + sig, (text + (" (core dumped)" if os.WCOREDUMP(status) else "") + "\n").encode()


def run_forked(kind: str, cmd: str, code: str) -> None:
    import select
    import time

    sys.stdout.flush()
    sys.stderr.flush()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # no room for a fork: a real interpreter (it may not start either; then that is the result)
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        run(kind, cmd)
        return
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        child(code, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    deadline = time.monotonic() + timeout
    got = {out_r: b"", err_r: b""}
    open_fds = [out_r, err_r]
    status = None
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            break
        if open_fds:
            for fd in select.select(open_fds, [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if chunk:
                    got[fd] += chunk
                else:
                    open_fds.remove(fd)
        else:  # both closed: the child is exiting
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            else:
                time.sleep(0.005)
    os.close(out_r)
    os.close(err_r)
    if status is None:
        out(kind, cmd, -1, True, "", "")  # as subprocess.run's TimeoutExpired above
    else:
        exit_code, said = shell_status(status)
        out(kind, cmd, exit_code, False, cut(got[out_r]), cut(got[err_r] + said))


fork_ok = hasattr(os, "fork") and same_python()
for c, code in commands:
    if code is not None and fork_ok:
        run_forked("command", c, code)
    else:
        run("command", c)
if modules:
    import importlib
    import traceback

    for m in modules:
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
            out("import", m, False, type(e).__name__ + ": " + str(e).replace("\n", " ")[:300], where, files)
if version:
    run("version", version)
