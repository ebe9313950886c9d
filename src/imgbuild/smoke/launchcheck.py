"""What a launcher (sparkrun) needs from an image: `docker run IMAGE bash -c CMD` must run under the ENTRYPOINT
(empty, or a passthrough ending in `exec "$@"`), and a standalone `kill` on PATH for its health check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imgbuild.errors import ConfigError
from imgbuild.platforms import Platform

if TYPE_CHECKING:
    from imgbuild.engine import Engine, ImageInfo

TOKEN = "sparkrun_probe_42"
# sparkrun's PROBE_COMMAND (the sentinel is computed), then the first executable `kill` on the image's PATH
SCRIPT = (
    'printf "sparkrun_probe_%s\\n" "$((21*2))"; '
    'IFS=:; for d in $PATH; do if [ -f "$d/kill" ] && [ -x "$d/kill" ]; then echo "kill=$d/kill"; break; fi; done'
)
ARGV = ("bash", "-c", SCRIPT)

Result = tuple[str, str, str]  # (check name, pass|fail, detail)


@dataclass(frozen=True)
class Probe:
    ran: bool  # bash ran the command (the sentinel was printed)
    kill: str | None  # the standalone kill it found on PATH


def parse(stdout: str) -> Probe:
    ran = any(line.strip() == TOKEN for line in stdout.splitlines())
    kill = next((line[5:].strip() for line in stdout.splitlines() if line.startswith("kill=")), None)
    return Probe(ran, kill or None)


def results(entrypoint: Sequence[str] | None, first: Probe, cleared: Probe | None) -> list[Result]:
    """The entrypoint and kill checks (pure); `kill` is read from whichever run executed the script."""
    ep = list(entrypoint or [])
    if first.ran and not ep:
        entry: Result = ("entrypoint", "pass", "no ENTRYPOINT: a launcher's command is the argv")
    elif first.ran:
        entry = ("entrypoint", "pass", f'ENTRYPOINT {ep} passes the command through (exec "$@"); kept')
    elif ep and cleared is not None and cleared.ran:
        entry = (
            "entrypoint",
            "fail",
            f"ENTRYPOINT {ep} consumes the command a launcher appends (sparkrun runs `IMAGE bash -c ...`); "
            'clear it (ENTRYPOINT []), or use a wrapper that ends in exec "$@"',
        )
    else:
        entry = ("entrypoint", "fail", "`bash -c` did not run in the image: sparkrun's scripts need bash on PATH")
    ran = first if first.ran else (cleared or first)
    if ran.kill:
        kill: Result = ("kill", "pass", f"{ran.kill} (sparkrun's health check runs `docker exec ... kill -0`)")
    elif not ran.ran:
        kill = ("kill", "fail", "not checked: `bash -c` did not run in the image")
    else:
        kill = (
            "kill",
            "fail",
            "no standalone `kill` on PATH (only the shell builtin): sparkrun's health check runs "
            "`docker exec CONTAINER kill -0 PID`; install procps (Debian/Ubuntu) in the image",
        )
    return [entry, kill]


def run(engine: Engine, info: ImageInfo, platform: Platform | None, timeout: int = 300) -> list[Result]:
    """Run the probe in `info`'s image (the second, cleared run only when the first did not run it)."""
    first = parse(engine.run(info.id, ARGV, platform=platform, timeout=timeout).stdout)
    cleared = None
    if not first.ran and info.entrypoint:
        cleared = parse(engine.run(info.id, ARGV, platform=platform, timeout=timeout, entrypoint=[""]).stdout)
    return results(info.entrypoint, first, cleared)


# -- the base's ENTRYPOINT, decided before a build (image.entrypoint: keep | clear) ------------------
EXPLAIN = (
    'two cases: a consuming ENTRYPOINT such as ["vllm","serve"] eats the command a launcher appends '
    "(sparkrun runs `IMAGE bash -c ...`), so it must be cleared: image.entrypoint: clear (what imgbuild does "
    "for a consuming one by default); a passthrough wrapper such as NGC's /opt/nvidia/nvidia_entrypoint.sh, "
    'which does its setup and ends in exec "$@", must be kept or that setup is lost: image.entrypoint: keep'
)


def base_kind(entrypoint: Sequence[str] | None, first: Probe | None) -> str:
    """ "none" (no ENTRYPOINT), "passthrough" (`bash -c` ran under it) or "consuming" (it did not) (pure)."""
    if not entrypoint:
        return "none"
    return "passthrough" if first is not None and first.ran else "consuming"


def known_consuming(entrypoint: Sequence[str]) -> bool:
    """The stock vLLM images' ["vllm", "serve"]: consuming, known without a container (it would start a server)."""
    return bool(entrypoint) and entrypoint[0].rsplit("/", 1)[-1] == "vllm"


def probe_base(engine: Engine, info: ImageInfo, platform: Platform, *, timeout: int = 300) -> str:
    """base_kind of the base's ENTRYPOINT: one container at most (none for empty or known_consuming)."""
    if not info.entrypoint or known_consuming(info.entrypoint):
        return base_kind(info.entrypoint, None)
    return base_kind(info.entrypoint, parse(engine.run(info.id, ARGV, platform=platform, timeout=timeout).stdout))


def check_decision(
    variant: str, base_ref: str, entrypoint: Sequence[str] | None, kind: str, decision: str | None
) -> None:
    """Refuse a passthrough ENTRYPOINT the config did not decide about, and `keep` of a consuming one (pure)."""
    where = f"images/{variant}.yaml: image.entrypoint"
    ep = list(entrypoint or [])
    if kind == "passthrough" and decision is None:
        raise ConfigError(
            f"{where} is not set, and the base {base_ref} has ENTRYPOINT {ep}, which passes a command through "
            "(it ran `bash -c ...` appended to it): imgbuild will not clear it silently",
            hint=f"{EXPLAIN}. Set one of them in images/{variant}.yaml (or a variant it comes from).",
        )
    if kind == "consuming" and decision == "keep":
        raise ConfigError(
            f"{where} is keep, but the base {base_ref}'s ENTRYPOINT {ep} consumes the command a launcher appends "
            "(`bash -c ...` did not run under it)",
            hint=f"{EXPLAIN}. Use image.entrypoint: clear (or leave it unset) for this base.",
        )
