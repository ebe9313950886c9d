"""Who made a container: the label imgbuild puts on each one it creates, and whether that maker is certainly dead
(so a leftover of it may be removed on a daemon other hosts and processes share)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# On every container imgbuild creates: who made it, as `Owner.label()` spells it (boot id, pid namespace, pid, the
# process's start time), so that on a daemon several hosts or pid namespaces share, a leftover is removed only by
# a process that can see its maker is dead. The label before this one, `imgbuild.container-of=PID`, held the pid
# alone: such containers are never removed (whose pid it was cannot be known); OWNER_LABEL is a new name so that an
# older imgbuild, which removes every `container-of` container whose pid is not alive on its host, leaves ours.
OWNER_LABEL = "imgbuild.owner"
OLD_OWNER_LABEL = "imgbuild.container-of"


@dataclass(frozen=True)
class Owner:
    """The process that made a container, known beyond its pid: the kernel's boot id (a host, one boot of it), the
    pid namespace (a container or `unshare -p` on that host), the pid in it and the process's start time (clock
    ticks since boot, so a reused pid is told apart). A part this process could not read is "" and never matches."""

    boot: str
    pidns: str
    pid: int
    start: str

    @classmethod
    def of_this_process(cls) -> Owner:
        pid = os.getpid()
        return cls(_boot_id(), _pid_namespace(), pid, _start_time(pid) or "")

    def label(self) -> str:
        return f"boot={self.boot} pidns={self.pidns} pid={self.pid} start={self.start}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner a label names; None for anything else (an old pid-only label, a hand-made one)."""
        fields = dict(part.partition("=")[::2] for part in text.split())
        if set(fields) != {"boot", "pidns", "pid", "start"} or not fields["pid"].isdigit():
            return None
        return cls(fields["boot"], fields["pidns"], int(fields["pid"]), fields["start"])

    def is_dead_here(self, here: Owner) -> bool:
        """True only when this owner is certainly of `here`'s boot and pid namespace and certainly not running:
        its pid is gone, or is held by a process that started at another time (the pid was reused)."""
        if not (self.boot and self.pidns and self.start) or (self.boot, self.pidns) != (here.boot, here.pidns):
            return False  # another host, boot or pid namespace, or one we cannot tell: not ours to judge
        if self.pid == here.pid and self.start == here.start:
            return False  # this very process
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            pass  # PermissionError: it runs, as another user
        started = _start_time(self.pid)  # None where /proc is not this pid namespace's: cannot tell, so alive
        return started is not None and started != self.start


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        return ""


def _start_time(pid: int) -> str | None:
    """The start time of `pid` in this pid namespace (field 22 of /proc/PID/stat); None when it cannot be read,
    or /proc is mounted for another pid namespace (its `self` is not our pid), where PID would name another."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None
