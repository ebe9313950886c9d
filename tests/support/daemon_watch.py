"""Whether the Docker daemon the tests run on died during a test, and what its log said then.

A daemon that crashes takes every later docker test down with it, each failing on "cannot reach
the Docker daemon"; the test that was running when it died, and the daemon's own last words, are
what a reader needs. This reads the pid file and the log that `.ci/setup-host.sh` writes.
"""

from __future__ import annotations

import os
from pathlib import Path

PIDFILE = Path("/var/run/docker.pid")
LOG = Path("/var/log/dockerd.log")
MARKS = ("fatal error:", "panic:", "level=fatal")


def dockerd_pid(pidfile: Path = PIDFILE) -> int | None:
    """The running daemon's pid, or None (no pid file, or that process is gone)."""
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def log_size(log: Path = LOG) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def last_words(since: int, log: Path = LOG, lines: int = 12) -> str:
    """The daemon log written after byte `since`: from its first crash line on (a few lines of the stack),
    else its last lines."""
    try:
        with log.open("rb") as fh:
            fh.seek(since)
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {log}: {exc})"
    rows = text.splitlines()
    start = next((i for i, row in enumerate(rows) if row.startswith(MARKS) or any(m in row for m in MARKS)), None)
    picked = rows[start : start + lines] if start is not None else rows[-lines:]
    return "\n".join(picked) or f"({log} has nothing new)"
