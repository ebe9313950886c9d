"""Smoke commands to run both ways, a fork of the probe and a real `python3 -c`, and what must agree."""

from __future__ import annotations

from imgbuild.images import probe

# Each exactly `python3 -c CODE` (probe.fork_code takes them all).
COMMANDS = (
    'python3 -c "import sys; print(sys.argv, sorted(sys.modules))"',
    'python3 -c "print(sorted(globals().items())); import __main__; print(__main__.__dict__ is globals())"',
    "python3 -c 'import os, sys; print(sorted(os.environ), os.getcwd(), sys.path[0] == \"\")'",
    """python3 -c 'import atexit as a, sys; a.register(print, "at exit"); print("err", file=sys.stderr); print(1)'""",
    'python3 -c "raise ValueError(42)"',
    'python3 -c "import sys; sys.exit(3)"',
    "python3 -c \"import sys; sys.exit('bye')\"",
    'python3 -c "x x"',
    'python3 -c "def f(): 1 / 0\nf()"',
    'python3 -c "import time; time.sleep(60)"',
    'python3 -c "import os; os.kill(os.getpid(), 15)"',
    'python3 -c "raise KeyboardInterrupt"',
)
# What the real `python3 -c` gives (exit code, timed out, last line of stderr), so that agreeing means something.
EXPECTED = {
    COMMANDS[4]: (1, False, "ValueError: 42"),
    COMMANDS[5]: (3, False, ""),
    COMMANDS[6]: (1, False, "bye"),
    COMMANDS[7]: (1, False, "SyntaxError: invalid syntax"),
    COMMANDS[8]: (1, False, "ZeroDivisionError: division by zero"),
    COMMANDS[9]: (-1, True, ""),
    COMMANDS[10]: (143, False, "Terminated"),  # /bin/sh's 128 + SIGTERM, and its message
    COMMANDS[11]: (130, False, "KeyboardInterrupt"),  # python kills itself with SIGINT
}
# Its parent process: /bin/sh for a real `python3 -c`, the probe for a fork (the one difference meant).
PARENT = "python3 -c \"import os; print(open('/proc/%d/comm' % os.getppid()).read().strip())\""


def jobs(timeout: int) -> tuple[probe.Job, probe.Job]:
    """(forked, real): the same commands, run in a fork of the probe and through /bin/sh.

    `timeout` per command: the sleeping one reaches it; under qemu on a busy host a python start can take 2 s.
    """
    commands = (*COMMANDS, PARENT)
    assert all(probe.fork_code(c) is not None for c in commands)
    return probe.Job((), commands, timeout), probe.Job((), commands, timeout, fork=False)


def compare(forked: probe.ProbeResult, real: probe.ProbeResult) -> None:
    """Every command gave the same result both ways (stderr by its last line too), and it really forked."""
    for cmd in COMMANDS:
        f, r = forked.commands[cmd], real.commands[cmd]
        assert (f.exit_code, f.timed_out, f.stdout) == (r.exit_code, r.timed_out, r.stdout), (cmd, f, r)
        assert probe.last_line(f.stderr) == probe.last_line(r.stderr), cmd
        assert f.stderr == r.stderr, cmd
    for cmd, (code, timed_out, last) in EXPECTED.items():
        r = real.commands[cmd]
        assert (r.exit_code, r.timed_out, probe.last_line(r.stderr)) == (code, timed_out, last), cmd
    assert real.commands[COMMANDS[3]].stdout == "1\nat exit\n" and real.commands[COMMANDS[3]].stderr == "err\n"
    assert real.commands[PARENT].stdout == "sh\n"
    assert forked.commands[PARENT].stdout.startswith("python3")
