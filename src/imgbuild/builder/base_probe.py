"""What a build reads from a base by running its python3 once (one container per base and overlaid file set, kept
in the cache by the base's id: an image id is a digest, its files cannot change): the packages its site-packages
holds (`*.dist-info` names, for the package check, plan/packages.py) and the bytecode of the overlaid modules,
compiled by that python (plan/bytecode.py says why), with the sources put in by `docker cp`.

Checked, and why not:
- `compileall` in a RUN step of the image makes a layer whose files carry the build's mtimes (equal inputs would
  not give equal digests) and needs emulation on every build; compiling with this machine's python gives another
  magic number, or other bytes, unless it is the base's python exactly. The base's python, once per base, fits.
- `importlib.metadata` in the base would read every METADATA file under emulation; a dist-info directory's name is
  the wheel's `{name}-{version}`, and one `listdir` is all the check needs. The Docker API's archive endpoint cannot
  list a directory without copying all of it (gigabytes for site-packages).
- Two containers (one per question) cost a second start under emulation on every new base."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from imgbuild.atomic import write_json
from imgbuild.engine import Engine, check_binfmt
from imgbuild.errors import DockerError
from imgbuild.patches.variants import VariantPlan
from imgbuild.plan.builds import BaseInfo, BaseMap
from imgbuild.plan.bytecode import Bytecode, compiled
from imgbuild.plan.layers import overlay_files

FORMAT = "imgbuild-base-probe/1"
KEPT = "bases"  # the cache's folder: one JSON per base, site-packages and file set
STAGE = "/tmp/imgbuild-probe"  # where the sources go in the container
MARK = "imgbuild-base "
PROGRAM = r"""
import base64, importlib.util, os, sys
site, stage = sys.argv[1], sys.argv[2]
print("imgbuild-base", "python", sys.implementation.cache_tag, flush=True)
for name in sorted(os.listdir(site)) if os.path.isdir(site) else ():
    if name.endswith(".dist-info"):
        print("imgbuild-base", "dist", name, flush=True)
if sys.argv[3:]:
    import py_compile
for rel in sys.argv[3:]:
    target = site + "/" + rel
    out = stage + "/out.pyc"
    py_compile.compile(stage + "/src/" + rel, cfile=out, dfile=target, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    with open(out, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    print("imgbuild-base", "pyc", rel, importlib.util.cache_from_source(target), data, flush=True)
"""


@dataclass(frozen=True)
class BaseFacts:
    packages: Mapping[str, str]  # canonical project name -> version, by the dist-info directories' names
    bytecode: Bytecode


def key(image_id: str, site: str, files: Mapping[str, bytes]) -> str:
    lines = [FORMAT, image_id, site, *(f"{p}\0{hashlib.sha256(files[p]).hexdigest()}" for p in sorted(files))]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def read_for_build(
    engine: Engine, plans: Sequence[VariantPlan], bases: BaseMap, cache: Path
) -> dict[tuple[str, str], BaseFacts]:
    """(base image id, site-packages) -> what each base in `bases` holds, with the bytecode of every module the
    variants built on it overlay."""
    files: dict[tuple[str, str], dict[str, bytes]] = {}
    first: dict[tuple[str, str], BaseInfo] = {}
    by_name = {p.variant.name: p for p in plans}
    for (name, _), base in bases.items():
        plan = by_name[name]
        mine = files.setdefault((base.image_id, base.site_packages), {})
        mine.update({f.path: plan.contents[f.path] for f in overlay_files(plan) if compiled(f.path)})
        first.setdefault((base.image_id, base.site_packages), base)
    return {k: read(engine, first[k], files[k], cache) for k in files}


def read(engine: Engine, base: BaseInfo, files: Mapping[str, bytes], cache: Path) -> BaseFacts:
    """What `base` holds, and `files` (site-packages path -> source) compiled by its python; or as kept."""
    site = base.site_packages.rstrip("/")
    kept = cache / KEPT / f"{key(base.image_id, site, files)}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        data = json.loads(kept.read_text())
        pyc = {p: (c, base64.b64decode(b)) for p, (c, b) in data["bytecode"].items()}
        return BaseFacts(dict(data["packages"]), Bytecode(data["python"], pyc))
    check_binfmt(base.platform, engine.platform)
    res = engine.run(
        base.image_id,
        ["-c", PROGRAM, site, STAGE, *sorted(files)],
        platform=base.platform,
        entrypoint=["python3"],
        timeout=600,
        files={f"{STAGE}/src/{p}": data for p, data in files.items()},
    )
    facts = parse(res.stdout, site, base.ref)
    if res.exit_code != 0 or not facts.bytecode.python or set(facts.bytecode.files) != set(files):
        raise DockerError(
            f"base {base.ref}: its python3 could not list {site} and byte-compile the overlaid files "
            f"(exit {res.exit_code}): {(res.stderr or res.stdout).strip()[-400:]!r}",
            hint="imgbuild puts each overlaid module's checked-hash .pyc in its layer, compiled by the base's own "
            "python3, so that no .pyc of the base can make Python run the release's code; the base needs a python3 "
            "with py_compile (docs/building-images.md, Bytecode that cannot shadow a patch)",
        )
    with contextlib.suppress(OSError):  # a cache that cannot keep it asks again next time
        encoded = {p: [c, base64.b64encode(b).decode()] for p, (c, b) in facts.bytecode.files.items()}
        write_json(
            kept,
            {
                "format": FORMAT,
                "base": base.image_id,
                "packages": dict(facts.packages),
                "python": facts.bytecode.python,
                "bytecode": encoded,
            },
        )
    return facts


def parse(stdout: str, site: str, ref: str) -> BaseFacts:
    """The program's lines: its python's cache tag, each dist-info directory, each compiled module."""
    python, packages, pyc = "", dict[str, str](), dict[str, tuple[str, bytes]]()
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        kind, *rest = line[len(MARK) :].split(" ")
        if kind == "python" and len(rest) == 1:
            python = rest[0]
        elif kind == "dist" and len(rest) == 1:
            name, sep, version = rest[0].removesuffix(".dist-info").partition("-")
            if sep and version:
                packages[canonicalize_name(name)] = version
        elif kind == "pyc" and len(rest) == 3:
            rel, path, data = rest
            if not path.startswith(site + "/"):
                raise DockerError(
                    f"base {ref}: its python3 looks for the bytecode of {site}/{rel} at {path}, outside {site}/ "
                    "(PYTHONPYCACHEPREFIX is set in the base)",
                    hint="unset PYTHONPYCACHEPREFIX in the variant's image.env, so the .pyc imgbuild puts beside each "
                    "patched file is the one Python reads",
                )
            pyc[rel] = (path[len(site) + 1 :], base64.b64decode(data))
    return BaseFacts(packages, Bytecode(python, pyc))
