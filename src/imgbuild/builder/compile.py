"""Compile the overlaid files with the base's own python (plan/bytecode.py says why): one container per base and
file set, the sources put in with `docker cp`, each `.py` compiled by `py_compile` in checked-hash mode for the path
it will have in the image; kept in the cache by the base's id (an image id is a digest: its python cannot change).

Checked, and why not: `compileall` in a RUN step of the image makes a layer whose files carry the build's mtimes (so
equal inputs would not give equal digests) and needs emulation on every build; compiling with this machine's python
gives another magic number unless it is the base's version exactly. The base's python, once per base, fits."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Collection, Sequence
from pathlib import Path

from imgbuild.atomic import write_json
from imgbuild.engine import Engine, check_binfmt
from imgbuild.errors import DockerError
from imgbuild.patches.variants import VariantPlan
from imgbuild.plan.builds import BaseMap
from imgbuild.plan.bytecode import FORMAT, Bytecode, BytecodeMap, compiled
from imgbuild.plan.layers import overlay_files
from imgbuild.platforms import Platform

KEPT = "bytecode"  # the cache's folder: one JSON per base and file set
STAGE = "/tmp/imgbuild-compile"  # where the sources go in the container
MARK = "imgbuild-pyc "
PROGRAM = r"""
import base64, importlib.util, os, py_compile, sys
site, stage = sys.argv[1], sys.argv[2]
print("imgbuild-pyc", "python", sys.implementation.cache_tag, flush=True)
for rel in sys.argv[3:]:
    target = site + "/" + rel
    out = stage + "/out.pyc"
    py_compile.compile(stage + "/src/" + rel, cfile=out, dfile=target, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    with open(out, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    print("imgbuild-pyc", rel, importlib.util.cache_from_source(target), data, flush=True)
"""


def key(image_id: str, site: str, files: dict[str, bytes]) -> str:
    lines = [FORMAT, image_id, site, *(f"{p}\0{hashlib.sha256(files[p]).hexdigest()}" for p in sorted(files))]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def compile_for_bases(engine: Engine, plans: Sequence[VariantPlan], bases: BaseMap, cache: Path) -> BytecodeMap:
    """The bytecode of every overlaid module for each base in `bases` (one container per base not yet kept)."""
    by_base: dict[tuple[str, str], dict[str, bytes]] = {}
    platform_of: dict[tuple[str, str], tuple[Platform, str]] = {}
    by_name = {p.variant.name: p for p in plans}
    for (name, platform), base in bases.items():
        plan = by_name[name]
        files = by_base.setdefault((base.image_id, base.site_packages), {})
        files.update({f.path: plan.contents[f.path] for f in overlay_files(plan) if compiled(f.path)})
        platform_of[(base.image_id, base.site_packages)] = (platform, base.ref)
    out: dict[tuple[str, str], Bytecode] = {}
    for (image_id, site), files in by_base.items():
        platform, ref = platform_of[(image_id, site)]
        out[(image_id, site)] = compile_on(engine, image_id, ref, platform, site, files, cache)
    return out


def compile_on(
    engine: Engine, image_id: str, ref: str, platform: Platform, site: str, files: dict[str, bytes], cache: Path
) -> Bytecode:
    """`files` (site-packages path -> source) compiled by the python of base `image_id`, or as kept."""
    kept = cache / KEPT / f"{key(image_id, site, files)}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads(kept.read_text())
        return Bytecode(data["python"], {p: (c, base64.b64decode(b)) for p, (c, b) in data["files"].items()})
    bytecode = _compile(engine, image_id, ref, platform, site.rstrip("/"), files)
    with contextlib.suppress(OSError):  # a cache that cannot keep it compiles again next time
        encoded = {p: [c, base64.b64encode(b).decode()] for p, (c, b) in bytecode.files.items()}
        write_json(kept, {"format": FORMAT, "base": image_id, "python": bytecode.python, "files": encoded})
    return bytecode


def _compile(
    engine: Engine, image_id: str, ref: str, platform: Platform, site: str, files: dict[str, bytes]
) -> Bytecode:
    check_binfmt(platform, engine.arch)
    res = engine.run(
        image_id,
        ["-c", PROGRAM, site, STAGE, *sorted(files)],
        platform=platform,
        entrypoint=["python3"],
        timeout=600,
        files={f"{STAGE}/src/{p}": data for p, data in files.items()},
    )
    python, out = _parse(res.stdout, site, files)
    if res.exit_code != 0 or python is None or set(out) != set(files):
        raise DockerError(
            f"base {ref}: its python3 could not byte-compile the overlaid files (exit {res.exit_code}): "
            f"{(res.stderr or res.stdout).strip()[-400:]!r}",
            hint="imgbuild puts each overlaid module's checked-hash .pyc in its layer, compiled by the base's own "
            "python3, so that no .pyc of the base can make Python run the release's code; the base needs a python3 "
            "with py_compile (docs/building-images.md, Bytecode)",
        )
    return Bytecode(python, out)


def _parse(stdout: str, site: str, files: Collection[str]) -> tuple[str | None, dict[str, tuple[str, bytes]]]:
    python, out = None, {}
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        parts = line[len(MARK) :].split(" ")
        if parts[0] == "python" and len(parts) == 2:
            python = parts[1]
        elif len(parts) == 3 and parts[0] in files:
            rel, pyc, data = parts
            if not pyc.startswith(site + "/"):
                raise DockerError(
                    f"the base's python3 looks for the bytecode of {site}/{rel} at {pyc}, outside {site}/ "
                    "(PYTHONPYCACHEPREFIX is set in the base)",
                    hint="unset PYTHONPYCACHEPREFIX in the variant's image.env, so the .pyc imgbuild puts beside each "
                    "patched file is the one Python reads",
                )
            out[rel] = (pyc[len(site) + 1 :], base64.b64decode(data))
    return python, out
