"""The test session's watch on dockerd (tests/support/daemon_watch.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support import daemon_watch


def test_a_pid_file_of_a_running_process_gives_its_pid_and_of_a_gone_one_none(tmp_path: Path) -> None:
    pidfile = tmp_path / "docker.pid"
    assert daemon_watch.dockerd_pid(pidfile) is None  # no file
    pidfile.write_text(f"{os.getpid()}\n")
    assert daemon_watch.dockerd_pid(pidfile) == os.getpid()
    beyond = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can have it
    pidfile.write_text(f"{beyond}\n")
    assert daemon_watch.dockerd_pid(pidfile) is None
    pidfile.write_text("not a pid\n")
    assert daemon_watch.dockerd_pid(pidfile) is None


def test_last_words_start_at_the_crash_written_after_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "dockerd.log"
    log.write_text("fatal error: an old crash, before the test\n")
    since = daemon_watch.log_size(log)
    rows = [f'level=info msg="row {i}"' for i in range(30)]
    stack = ["fatal error: concurrent map writes", "", "goroutine 99316 [running]:", "llb.addCap(...)"]
    log.write_text(log.read_text() + "\n".join([*rows, *stack, *rows]) + "\n")
    words = daemon_watch.last_words(since, log, lines=4).splitlines()
    assert words == stack


def test_last_words_without_a_crash_are_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "dockerd.log"
    log.write_text("".join(f"row {i}\n" for i in range(20)))
    assert daemon_watch.last_words(0, log, lines=3).splitlines() == ["row 17", "row 18", "row 19"]
    assert "has nothing new" in daemon_watch.last_words(daemon_watch.log_size(log), log)
    assert "cannot read" in daemon_watch.last_words(0, tmp_path / "absent.log")
