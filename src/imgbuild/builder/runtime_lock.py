"""The runtime base's lock files (pure): `images/runtime-lock/<os>-<arch>.txt`, each pin with the sha256 of
every file of its release. They are uv's own output: `uv pip compile --generate-hashes --python-platform`
resolves for the target's markers (which pip's `--platform` does not: pypa/pip#11664), and `uv pip install
--require-hashes` installs them; this module only reads them, for the base's key and the pins it names."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from imgbuild.errors import ConfigError
from imgbuild.platforms import Platform

LOCK_DIR = Path("images/runtime-lock")
PYTHON_VERSION = "3.11"  # Debian bookworm's python3, the skeleton's interpreter
MANYLINUX = "manylinux_2_36"  # bookworm's glibc 2.36: the newest wheels the base can load
ROOT = "vllm"
_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)(?P<hashes>(?:\s+--hash=sha256:[0-9a-f]{64})+)$"
)


def fix(platform: Platform) -> str:
    return f"regenerate it with `imgbuild skeleton --runtime --relock --platform {platform}`"


@dataclass(frozen=True)
class Pin:
    name: str  # canonical (PEP 503) name
    version: str
    hashes: tuple[str, ...]  # sha256 of each file of the release (uv lists them all; pip takes any)


@dataclass(frozen=True)
class RuntimeLock:
    """One platform's lock of the runtime base (`images/runtime-lock/<arch>.txt`): its text and its pins."""

    platform: Platform
    text: str
    pins: tuple[Pin, ...]

    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def pin(self, name: str) -> Pin | None:
        want = canonicalize_name(name)
        return next((p for p in self.pins if p.name == want), None)


def lock_name(platform: Platform) -> str:
    return f"{platform.os}-{platform.arch}.txt"


def uv_platform(platform: Platform) -> str:
    """uv's `--python-platform` for the base: the platform's machine with bookworm's manylinux."""
    return f"{platform.machine}-{MANYLINUX}"


def header(platform: Platform, overrides: Sequence[str] = ()) -> str:
    """The lock's first lines; with the overrides of patches/upstream.yaml it was resolved with (uv --override)."""
    return (
        f"# imgbuild runtime lock: {platform}, CPython {PYTHON_VERSION}, {uv_platform(platform)}\n"
        "# written by `imgbuild skeleton --runtime --relock` (uv pip compile --generate-hashes); "
        "installed with uv pip install --require-hashes --no-deps\n"
        + "".join(f"# uv --override {line} (an override in patches/upstream.yaml)\n" for line in overrides)
    )


def parse_lock(text: str, path: Path, platform: Platform) -> RuntimeLock:
    """A lock file; a requirement that is not `name==version --hash=sha256:HEX ...` is refused by its line."""
    pins: list[Pin] = []
    seen: dict[str, int] = {}
    start, parts = 0, list[str]()
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not parts and (not line or line.startswith("#")):
            continue
        start = start if parts else no
        parts.append(line.removesuffix("\\").strip())
        if line.endswith("\\"):
            continue  # the requirement goes on on the next line
        req, parts = " ".join(parts), []
        m = _PIN.match(req)
        if m is None:
            raise ConfigError(
                f"{path}:{start}: not a locked requirement: {req[:120]!r}",
                hint=f"each requirement is `name==version --hash=sha256:<64 hex> ...`; {fix(platform)}",
            )
        name = canonicalize_name(m["name"])
        if name in seen:
            raise ConfigError(
                f"{path}:{start}: {name} is locked twice (first at line {seen[name]})", hint=fix(platform)
            )
        seen[name] = start
        pins.append(Pin(name, m["version"], tuple(re.findall(r"sha256:([0-9a-f]{64})", m["hashes"]))))
    if parts:
        raise ConfigError(f"{path}:{start}: the last requirement ends in a line continuation", hint=fix(platform))
    if ROOT not in seen:
        raise ConfigError(f"{path}: the lock does not pin {ROOT}", hint=fix(platform))
    return RuntimeLock(platform, text, tuple(pins))


def load_lock(root: Path, platform: Platform) -> RuntimeLock:
    path = root / LOCK_DIR / lock_name(platform)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no runtime lock for {platform}", hint=fix(platform)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the runtime lock: {exc}", hint=fix(platform)) from exc
    return parse_lock(text, path, platform)
