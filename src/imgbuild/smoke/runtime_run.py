"""What `docker run` needs to run the runtime base's torch: `VLLM_TARGET_DEVICE=cpu` (vLLM's CLI needs a
device), and under qemu an aarch64 cpuinfo bind-mounted over /proc/cpuinfo (oneDNN segfaults reading the host's)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from imgbuild.platforms import Platform

CPUINFO_NAME = "cpuinfo-aarch64-gb10"
NO_GPU_ENV = {"VLLM_TARGET_DEVICE": "cpu"}
CORES = 10
# /proc/cpuinfo of an Armv9.2 Cortex-X925 core as Linux 6.x prints it
FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop "
    "sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm sb paca pacg dcpodp sve2 sveaes svepmull "
    "svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti ecv afp wfxt"
)
CPU = (
    "BogoMIPS\t: 2000.00\n"
    f"Features\t: {FEATURES}\n"
    "CPU implementer\t: 0x41\n"
    "CPU architecture: 8\n"
    "CPU variant\t: 0x0\n"
    "CPU part\t: 0xd85\n"
    "CPU revision\t: 1\n"
)


@dataclass(frozen=True)
class RunOptions:
    """Extra `docker run` options: `binds` in the docker SDK's "host:container:ro" form, and env."""

    binds: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def cpuinfo_file(cache: Path) -> Path:
    """The aarch64 cpuinfo in the cache, written atomically when missing or different."""
    path = cache / "runtime" / CPUINFO_NAME
    text = "\n".join(f"processor\t: {n}\n{CPU}" for n in range(CORES)) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{CPUINFO_NAME}.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def runtime_run_options(platform: Platform, cache: Path, *, emulated: bool | None = None) -> RunOptions:
    """Mounts and env for running the runtime base (or an image on it) for `platform`; `emulated` defaults to
    "the host's CPU is not the platform's"."""
    if emulated is None:
        emulated = platform.arch != Platform.host().arch
    binds = (f"{cpuinfo_file(cache)}:/proc/cpuinfo:ro",) if platform.arch == "arm64" and emulated else ()
    return RunOptions(binds=binds, env=dict(NO_GPU_ENV))
