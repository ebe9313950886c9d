"""`Platform`: an image platform as a value, parsed once where it enters, and the one architecture table."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from imgbuild.errors import UsageError

# docker arch -> machine name; what the stand-in skeleton and the vLLM release images serve
ARCHES = {"arm64": "aarch64", "amd64": "x86_64"}
KNOWN = tuple(f"linux/{arch}" for arch in ARCHES)
IMPLIED = {"arm64": "v8"}  # an arch's variant when none is named: `linux/arm64/v8` is `linux/arm64`
ALL = "all"  # --platform all: every platform a variant declares


@dataclass(frozen=True, order=True)
class Platform:
    os: str
    arch: str
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Platform:
        """`linux/arm64` (`linux/arm64/v8` is the same image); anything else is a UsageError naming the known."""
        parts = text.strip().split("/")
        known = len(parts) in (2, 3) and parts[0] == "linux" and parts[1] in ARCHES
        if known and (len(parts) == 2 or IMPLIED.get(parts[1]) == parts[2]):
            return cls(parts[0], parts[1])
        raise UsageError(f"{text!r}: unsupported platform; known: {', '.join(KNOWN)}")

    @classmethod
    def parse_list(cls, value: str, *, several: bool = False) -> tuple[Platform, ...]:
        """A --platform value, the one parser of it: one known platform, or where a command takes several
        (`several`) a comma-separated list of them or `all`, which is `()`: every declared platform (the caller's
        to say which). Anything else is a UsageError naming what is known."""
        if several and value == ALL:
            return ()
        items = [item.strip() for item in value.split(",")] if several else [value]
        bad = [item for item in items if not is_known(item)]
        if bad:
            known = ", ".join((*KNOWN, *((ALL,) if several else ())))
            raise UsageError(f"--platform {', '.join(bad)}: unsupported platform; known: {known}")
        return tuple(cls.parse(item) for item in items if item)

    @classmethod
    def read(cls, text: str) -> Platform:
        """`os/arch[/variant]` as `str()` writes it (images.lock), any platform a registry may list: not checked
        against KNOWN; `arm64/v8` is plain `arm64`."""
        return cls.of(*text.split("/", 2))

    @classmethod
    def of(cls, os: str, arch: str, variant: str = "") -> Platform:
        """As an engine reports it, not checked against KNOWN; `arm64/v8` is plain `arm64`."""
        return cls(os, arch, "" if IMPLIED.get(arch) == variant else variant)

    @classmethod
    def host(cls) -> Platform:
        """This machine's platform."""
        return cls("linux", cls.arch_of_machine(platform.machine()))

    @staticmethod
    def arch_of_machine(machine: str) -> str:
        """docker's arch name for a machine name (`x86_64` -> `amd64`); other names unchanged."""
        by_machine = {m: a for a, m in ARCHES.items()}
        return by_machine.get(machine, machine)

    @property
    def oci_variant(self) -> str:
        """The variant an OCI platform object names: the implied one written out (`v8` for arm64)."""
        return self.variant or IMPLIED.get(self.arch, "")

    @property
    def machine(self) -> str:
        """The machine name: `uname -m` in such a container, pip's and qemu's name for the arch (its binfmt_misc
        entry is `qemu-<machine>`)."""
        return ARCHES.get(self.arch, self.arch)

    def __str__(self) -> str:
        return f"{self.os}/{self.arch}" + (f"/{self.variant}" if self.variant else "")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """In a `--json` document (shapes.py): printed as `str()` writes it, read back with `read`."""
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            lambda v: v if isinstance(v, cls) else cls.read(str(v)),
            json_schema_input_schema=core_schema.str_schema(),
            serialization=core_schema.to_string_ser_schema(),
        )


def is_known(text: str) -> bool:
    """`text` parses as a platform (`Platform.parse`)."""
    try:
        Platform.parse(text)
    except UsageError:
        return False
    return True
