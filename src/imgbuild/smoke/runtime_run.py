"""What `docker run` needs to run the runtime base's torch: per platform, mounts and env.

Under qemu-user an arm64 container sees the host's /proc/cpuinfo (an x86 one) and no
`/sys/devices/system/cpu/cpu*/regs/identification/midr_el1`. torch's oneDNN (through
xbyak_aarch64) reads those to learn the CPU and crashes with SIGSEGV at `import torch`.
Bind-mounting an aarch64 cpuinfo over /proc/cpuinfo gives it a CPU to parse: a DGX
Spark's GB10 has 10 Cortex-X925 and 10 Cortex-A725 cores; the file lists the X925s
only, which is all the probe reads. The file is written into the imgbuild cache once.
No variable helps instead: with ONEDNN_MAX_CPU_ISA=ASIMD and DNNL_MAX_CPU_ISA=ASIMD
(oneDNN's ISA caps) `import torch` still dies the same way (the probe runs when the
library loads, before any cap is read).

On every platform `VLLM_TARGET_DEVICE=cpu` is set: without a GPU vLLM finds no platform,
and its CLI (smoke's `vllm --version` builds the whole argument parser, DeviceConfig included)
stops with "Failed to infer device type". Measured on amd64: the same 184 modules (the
seven patched ones and every module that imports one) import, or fail, with and without it.
"""

from __future__ import annotations

import os
import tempfile
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


@dataclass(frozen=True)
class RunOptions:
    """Extra `docker run` options: `binds` in the docker SDK's "host:container:ro" form, and env."""

    binds: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def cpuinfo_text(cores: int = CORES) -> str:
    """An aarch64 /proc/cpuinfo: `cores` Cortex-X925 (implementer 0x41, part 0xd85)."""
    blocks = []
    for n in range(cores):
        blocks.append(
            f"processor\t: {n}\n"
            "BogoMIPS\t: 2000.00\n"
            f"Features\t: {FEATURES}\n"
            "CPU implementer\t: 0x41\n"
            "CPU architecture: 8\n"
            "CPU variant\t: 0x0\n"
            "CPU part\t: 0xd85\n"
            "CPU revision\t: 1\n"
        )
    return "\n".join(blocks) + "\n"


def cpuinfo_file(cache: Path) -> Path:
    """The aarch64 cpuinfo in the cache, written atomically when missing or different."""
    path = cache / "runtime" / CPUINFO_NAME
    text = cpuinfo_text()
    if path.is_file() and path.read_text() == text:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{CPUINFO_NAME}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def runtime_run_options(platform: Platform, cache: Path, *, emulated: bool | None = None) -> RunOptions:
    """Mounts and env for running the runtime base (or an image on it) for `platform`.

    `emulated` defaults to "the host's CPU is not the platform's", i.e. qemu-user runs it.
    """
    if emulated is None:
        emulated = platform.arch != Platform.host().arch
    binds = (f"{cpuinfo_file(cache)}:/proc/cpuinfo:ro",) if platform.arch == "arm64" and emulated else ()
    return RunOptions(binds=binds, env=dict(NO_GPU_ENV))
