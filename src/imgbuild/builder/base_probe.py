"""What a build reads from a base by running its python3 once (one container per base and overlaid file set, kept
in the cache by the base's id: an image id is a digest, its files cannot change): the packages its site-packages
holds (`*.dist-info` names, for the package check, plan/packages.py) and the bytecode of the overlaid modules,
compiled by that python (plan/bytecode.py says why), with the sources put in by `docker cp`.

What the base holds and which python it has are kept per base (`<key>.base.json`); a later file set (an edit of a
patch) is compiled on this machine when it has a python of exactly the base's version, magic number and cache tag
(the same compiler writes the same checked-hash bytes: tests/docker/test_base_probe_host.py compares them), else
in a container again. Issue 45 measured that container at 0.6 s of a 2.45 s edit-and-rebuild at real size
(benchmarks/results/issue45-edit-noop.txt).

Checked, and why not:
- `compileall` in a RUN step of the image makes a layer whose files carry the build's mtimes (equal inputs would
  not give equal digests) and needs emulation on every build; compiling with this machine's python gives another
  magic number, or other bytes, unless it is the base's python exactly. The base's python, once per base, fits.
- `importlib.metadata` in the base would read every METADATA file under emulation; a dist-info directory's name is
  the wheel's `{name}-{version}`, and one `listdir` is all the check needs. The Docker API's archive endpoint cannot
  list a directory without copying all of it (gigabytes for site-packages).
- Two containers (one per question) cost a second start under emulation on every new base.
- A python of the same minor version only (what the runtime base's own bytecode uses, builder/runtime_bytecode.py,
  for a stand-in) is not enough for a production base: a patch release may change what the compiler writes."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from imgbuild import proc
from imgbuild.atomic import write_json
from imgbuild.engine import Engine, check_binfmt
from imgbuild.errors import DockerError
from imgbuild.patches.variants import VariantPlan
from imgbuild.plan.builds import BaseInfo, BaseMap
from imgbuild.plan.bytecode import Bytecode, compiled
from imgbuild.plan.layers import overlay_files

FORMAT = "imgbuild-base-probe/2"
KEPT = "bases"  # the cache's folder: one JSON per base, site-packages and file set
STAGE = "/tmp/imgbuild-probe"  # where the sources go in the container
MARK = "imgbuild-base "
PROGRAM = r"""
import base64, importlib.util, os, platform, sys
site, stage = sys.argv[1], sys.argv[2]
print("imgbuild-base", "python", sys.implementation.cache_tag, platform.python_version(),
      importlib.util.MAGIC_NUMBER.hex(), flush=True)
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
class Python:
    """What identifies a python's checked-hash bytecode: equal values, equal bytes for equal sources."""

    cache_tag: str  # cpython-312
    version: str  # 3.12.3
    magic: str  # importlib.util.MAGIC_NUMBER, hex


@dataclass(frozen=True)
class BaseFacts:
    packages: Mapping[str, str]  # canonical project name -> version, by the dist-info directories' names
    bytecode: Bytecode
    python: Python | None = None  # None: an older probe's record


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
    """What `base` holds, and `files` (site-packages path -> source) compiled by its python: as kept, else compiled
    here by a python exactly the base's (known from an earlier probe of this base), else in a container."""
    site = base.site_packages.rstrip("/")
    kept = cache / KEPT / f"{key(base.image_id, site, files)}.json"
    facts = _load(kept)
    if facts is not None:
        return facts
    known = _load(cache / KEPT / f"{key(base.image_id, site, {})}.json")  # the base alone: packages, its python
    if known is not None and known.python is not None:
        here = compile_here(known.python, site, files, base.ref) if files else {}
        if here is not None:
            facts = BaseFacts(known.packages, Bytecode(known.python.cache_tag, here), known.python)
            _keep(kept, base, facts)
            return facts
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
    if res.exit_code != 0 or facts.python is None or set(facts.bytecode.files) != set(files):
        raise DockerError(
            f"base {base.ref}: its python3 could not list {site} and byte-compile the overlaid files "
            f"(exit {res.exit_code}): {(res.stderr or res.stdout).strip()[-400:]!r}",
            hint="imgbuild puts each overlaid module's checked-hash .pyc in its layer, compiled by the base's own "
            "python3, so that no .pyc of the base can make Python run the release's code; the base needs a python3 "
            "with py_compile (docs/building-images.md, Bytecode that cannot shadow a patch)",
        )
    _keep(kept, base, facts)
    if files:  # the base alone, for the next file set
        _keep(cache / KEPT / f"{key(base.image_id, site, {})}.json", base, BaseFacts(facts.packages, Bytecode(
            facts.bytecode.python, {}), facts.python))  # fmt: skip
    return facts


def compile_here(want: Python, site: str, files: Mapping[str, bytes], ref: str) -> dict[str, tuple[str, bytes]] | None:
    """`files` compiled by a python on this machine that is exactly `want` (version, magic number, cache tag), as
    the base's python would compile them; None when this machine has none."""
    for python in _pythons(want.version):
        with tempfile.TemporaryDirectory(prefix="imgbuild-pyc-") as stage:
            for rel, data in files.items():
                (Path(stage) / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(stage) / "src" / rel).write_bytes(data)
            try:  # -I: no PYTHON* variables (PYTHONPYCACHEPREFIX would move the .pyc), no user site
                done = proc.run([python, "-I", "-c", PROGRAM, site, stage, *sorted(files)], text=True, timeout=300)
            except (proc.ToolNotFound, proc.ToolTimeout):
                continue
        if done.returncode == 0:
            facts = parse(done.stdout, site, ref)
            if facts.python == want and set(facts.bytecode.files) == set(files):
                return dict(facts.bytecode.files)
    return None


def _pythons(version: str) -> list[str]:
    """The interpreters on this machine that may be python `version`: imgbuild's own only if it is, then
    `pythonX.Y` on PATH and in /usr/bin, /usr/local/bin; each asked for its identity by the program itself."""
    minor = ".".join(version.split(".")[:2])
    own = os.path.realpath(sys.executable)
    found = [sys.executable] if platform.python_version() == version else []
    for path in (shutil.which(f"python{minor}"), f"/usr/bin/python{minor}", f"/usr/local/bin/python{minor}"):
        if path and os.access(path, os.X_OK) and os.path.realpath(path) != own:
            found.append(path)
    return list(dict.fromkeys(os.path.realpath(p) for p in found))


def _load(path: Path) -> BaseFacts | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        data = json.loads(path.read_text())
        pyc = {p: (c, base64.b64decode(b)) for p, (c, b) in data["bytecode"].items()}
        python = Python(**data["python"])
        return BaseFacts(dict(data["packages"]), Bytecode(python.cache_tag, pyc), python)
    return None


def _keep(path: Path, base: BaseInfo, facts: BaseFacts) -> None:
    assert facts.python is not None
    with contextlib.suppress(OSError):  # a cache that cannot keep it asks again next time
        encoded = {p: [c, base64.b64encode(b).decode()] for p, (c, b) in facts.bytecode.files.items()}
        write_json(
            path,
            {
                "format": FORMAT,
                "base": base.image_id,
                "packages": dict(facts.packages),
                "python": dataclasses.asdict(facts.python),
                "bytecode": encoded,
            },
        )


def parse(stdout: str, site: str, ref: str) -> BaseFacts:
    """The program's lines: its python's cache tag, each dist-info directory, each compiled module."""
    python: Python | None = None
    packages, pyc = dict[str, str](), dict[str, tuple[str, bytes]]()
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        kind, *rest = line[len(MARK) :].split(" ")
        if kind == "python" and len(rest) == 3:
            python = Python(*rest)
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
    return BaseFacts(packages, Bytecode(python.cache_tag if python else "", pyc), python)
