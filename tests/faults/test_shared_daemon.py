"""One daemon, several "hosts": no imgbuild removes a container it cannot prove is its own dead leftover.

Each "host" is a pid namespace of its own (`unshare --pid --fork --mount-proc`), all on the host's daemon, as CI
jobs in containers sharing a mounted docker.sock are. The runs in two namespaces get the same pid (2), so the
pid alone names neither. A run holds a container of a sleeping image (Engine.run), as a smoke run does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imgbuild.engine import Engine
from imgbuild.owner import OLD_OWNER_LABEL, OWNER_LABEL, Owner
from tests.support import needs

pytestmark = pytest.mark.faults

RUN = "import sys\nfrom imgbuild.engine import Engine\nEngine.connect().run(sys.argv[1], ['/sleep', '120'])\n"
CLEAN = "from imgbuild.engine import Engine\nEngine.connect()\n"  # what every imgbuild command does first


@dataclass
class Host:
    """A pid namespace with its own /proc, kept alive by a `sleep` that is its pid 1."""

    holder: subprocess.Popen[bytes]
    init: int  # the host pid of its pid 1

    @property
    def pidns(self) -> str:
        return os.readlink(f"/proc/{self.init}/ns/pid").removeprefix("pid:").strip("[]")

    def popen(self, code: str, *args: str) -> subprocess.Popen[bytes]:
        """`python3 -c CODE ARGS` inside this namespace (its pid and mount namespaces: its /proc)."""
        argv = ["nsenter", "-t", str(self.init), "-p", "-m", "--", sys.executable, "-c", code, *args]
        return subprocess.Popen(argv, stderr=subprocess.PIPE, env=dict(os.environ))

    @staticmethod
    def kill(run: subprocess.Popen[bytes]) -> None:
        """SIGKILL the python `popen` started (nsenter's child: killing nsenter would leave it running)."""
        (inner,) = Path(f"/proc/{run.pid}/task/{run.pid}/children").read_text().split()
        os.kill(int(inner), signal.SIGKILL)
        run.wait(timeout=60)

    def clean(self) -> None:
        done = self.popen(CLEAN)
        _, err = done.communicate(timeout=120)
        assert done.returncode == 0, err.decode()


@contextlib.contextmanager
def new_host() -> Iterator[Host]:
    holder = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sleep", "600"])
    try:
        deadline = time.monotonic() + 30
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children")
        while not children.read_text().split():
            assert holder.poll() is None, "unshare failed: the fault tier runs as root (mounting a /proc)"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield Host(holder, int(children.read_text().split()[0]))
    finally:
        holder.kill()
        holder.wait()


def labelled(engine: Engine, image: str) -> dict[str, Owner | None]:
    """Every container of `image` with imgbuild's owner label: id -> the owner it names."""
    found = engine.client.api.containers(all=True, filters={"label": OWNER_LABEL, "ancestor": image})
    return {c["Id"]: Owner.parse((c.get("Labels") or {}).get(OWNER_LABEL, "")) for c in found}


def running(engine: Engine, cid: str) -> bool:
    try:
        return bool(engine.client.api.inspect_container(cid)["State"]["Running"])
    except Exception:  # noqa: BLE001 - gone
        return False


def wait_for_container(engine: Engine, image: str, pidns: str, run: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 120
    while True:
        ids = [cid for cid, o in labelled(engine, image).items() if o and o.pidns == pidns and running(engine, cid)]
        if ids:
            (cid,) = ids
            return cid
        assert run.poll() is None, run.stderr.read().decode() if run.stderr else ""
        assert time.monotonic() < deadline, "the run's container never appeared"
        time.sleep(0.05)


def test_two_hosts_on_one_daemon_keep_each_others_live_containers(engine: Engine, sleep_image: str) -> None:
    needs.tool("unshare", "faults", "pid namespaces as separate hosts", "util-linux")
    needs.tool("nsenter", "faults", "running in a pid namespace", "util-linux")
    with new_host() as a, new_host() as b, new_host() as c:
        run_a, run_b = a.popen(RUN, sleep_image), b.popen(RUN, sleep_image)
        try:
            in_a = wait_for_container(engine, sleep_image, a.pidns, run_a)
            in_b = wait_for_container(engine, sleep_image, b.pidns, run_b)
            owners = labelled(engine, sleep_image)
            owner_a, owner_b = owners[in_a], owners[in_b]
            assert owner_a is not None and owner_b is not None
            assert owner_a.pid == owner_b.pid == 2  # the same pid: the pid alone would not tell them apart
            assert owner_a.boot == owner_b.boot == Owner.of_this_process().boot

            # A third host (its first command is its pid 2; its second, pid 3, sees no pid 2: the pid-only label
            # of before had it remove both), each host itself, and this test's own namespace (pid 2 is kthreadd):
            # every one of them starts a command, and both containers live on.
            for host in (c, c, a, b):
                host.clean()
            Engine.connect()
            assert running(engine, in_a) and running(engine, in_b)
            assert run_a.poll() is None and run_b.poll() is None

            # Host A's run is killed: its container stays, a leftover only A can prove dead.
            Host.kill(run_a)
            assert running(engine, in_a)
            for host in (c, b):
                host.clean()
            Engine.connect()
            assert in_a in labelled(engine, sleep_image), "another host removed A's leftover: it cannot know"
            a.clean()  # the next command on host A
            assert in_a not in labelled(engine, sleep_image)
            assert running(engine, in_b) and run_b.poll() is None  # B's run never noticed
        finally:
            for run in (run_a, run_b):
                with contextlib.suppress(Exception):
                    Host.kill(run)
            for cid in labelled(engine, sleep_image):
                with contextlib.suppress(Exception):
                    engine.client.api.remove_container(cid, force=True)


def test_leftovers_removed_only_when_provably_dead_here(engine: Engine, sleep_image: str) -> None:
    """Labels as other hosts, reused pids and the old pid-only label write them; one command starts."""
    here = Owner.of_this_process()
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid of this namespace that is no longer running
    cases = {
        "dead here": (Owner(here.boot, here.pidns, dead.pid, "1").label(), False),
        "pid reused": (Owner(here.boot, here.pidns, os.getpid(), "1").label(), False),  # we run, but started later
        "alive here": (here.label(), True),
        "another boot": (Owner("0" * 8, here.pidns, dead.pid, "1").label(), True),
        "another pid namespace": (Owner(here.boot, "1", dead.pid, "1").label(), True),
        "unreadable start": (Owner(here.boot, here.pidns, dead.pid, "").label(), True),
        "not a label of ours": ("pid=1", True),
    }
    made = {}
    try:
        for name, (label, _) in cases.items():
            made[name] = engine.client.api.create_container(sleep_image, ["/sleep", "1"], labels={OWNER_LABEL: label})[
                "Id"
            ]
        old = engine.client.api.create_container(sleep_image, ["/sleep", "1"], labels={OLD_OWNER_LABEL: "999999"})
        made["old pid-only label"] = old["Id"]
        subprocess.run([sys.executable, "-c", CLEAN], check=True, timeout=120)  # a command, in its own process
        left = {c["Id"] for c in engine.client.api.containers(all=True, filters={"ancestor": sleep_image})}
        kept = {name for name, cid in made.items() if cid in left}
        assert kept == {name for name, (_, keep) in cases.items() if keep} | {"old pid-only label"}
    finally:
        for cid in made.values():
            with contextlib.suppress(Exception):
                engine.client.api.remove_container(cid, force=True)
