"""Minimal pure-python wheels for uv to resolve and install offline from a find-links folder."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def wheel(where: Path, name: str, requires: list[str], version: str = "1.0", payload: bytes = b"") -> Path:
    """A wheel of `name` with these Requires-Dist lines; `payload` (if any) as `name/payload.bin`, to give it
    weight."""
    dist = f"{name}-{version}.dist-info"
    head = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta = head + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}/__init__.py": b"X = 1\n",
        **({f"{name}/payload.bin": payload} if payload else {}),
        f"{dist}/METADATA": meta.encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
        for p, d in files.items()
    )
    path = where / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for p, d in [*files.items(), (f"{dist}/RECORD", f"{record}{dist}/RECORD,,\n".encode())]:
            zf.writestr(p, d)
    return path
