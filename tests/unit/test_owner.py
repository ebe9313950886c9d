"""Who made a container (imgbuild.owner.Owner): the label, and when a leftover may be removed."""

from __future__ import annotations

import os
from pathlib import Path

from imgbuild.owner import Owner


def unused_pid() -> int:
    """A pid no process of this namespace holds."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_the_label_names_boot_namespace_pid_and_start_and_reads_back() -> None:
    here = Owner.of_this_process()
    assert here.boot and here.pidns.isdigit() and here.pid == os.getpid() and here.start.isdigit()
    assert Owner.parse(here.label()) == here


def test_labels_that_are_not_an_owner_read_as_none() -> None:
    for text in ("", "12345", "pid=1", "boot=a pidns=1 pid=x start=1", "boot=a pidns=1 pid=1 start=1 extra=1"):
        assert Owner.parse(text) is None, text


def test_dead_only_when_this_namespace_and_gone_or_reused() -> None:
    here = Owner.of_this_process()
    gone = unused_pid()
    assert Owner(here.boot, here.pidns, gone, "1").is_dead_here(here)
    assert Owner(here.boot, here.pidns, here.pid, "1").is_dead_here(here)  # our pid, an earlier process's
    assert not here.is_dead_here(here)
    assert not Owner("another-boot", here.pidns, gone, "1").is_dead_here(here)
    assert not Owner(here.boot, "1", gone, "1").is_dead_here(here)
    assert not Owner(here.boot, here.pidns, gone, "").is_dead_here(here)  # a start time it could not read
    assert not Owner(here.boot, here.pidns, gone, "1").is_dead_here(Owner("", "", 1, ""))  # we know nothing
