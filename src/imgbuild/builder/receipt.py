"""A build's receipt: what a finished `imgbuild build` made, kept under a key of everything that decides its plan,
so that the same build asked again with nothing changed is answered from the engine alone.

A no-op build used to load the project, apply the stack in memory to plan the layers (gitpython reading the release
files) and resolve the bases, only to find every image already there: 0.85 s against 0.60 s from a receipt at real
size (benchmarks/results/issue45-receipt.txt). The plan is a function of the project's files (patches/, images/,
images.lock), its git HEAD and origin (the revision labels), imgbuild's own code, the selection and the options;
the images are the engine's. The key hashes the first group (file contents, and imgbuild's modules by size and
mtime); the receipt names, per image, its base's ref and id, its immutable tag's id and inputs digest, and its
moving tags. `reuse` answers only when the engine still says all of it: the base ref names the same id, each
immutable tag names its image with the recorded `imgbuild.inputs`, each join its index, and (with smoke) each moving
tag what it should. Anything else, or no receipt, runs the whole build (builder/runner.py), which keeps a new one.
`--force` and `--builder` (a remote BuildKit resolves its own bases) never use one.

Nothing else fits: BuildKit's own cache needs the plan (the contexts) before it can answer, and `docker buildx bake
--print` the bake file that the plan writes. Receipts live in `<cache>/receipts/`, the newest KEEP of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, astuple, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import imgbuild
from imgbuild import proc
from imgbuild.atomic import write_json
from imgbuild.builder.options import BuildOptions
from imgbuild.builder.result import BuildResult, ImageBuilt, OnSmoke, reused, up_to_date
from imgbuild.cache import cache_dir
from imgbuild.platforms import Platform
from imgbuild.progress import Say

if TYPE_CHECKING:
    from imgbuild.engine import Engine
    from imgbuild.plan.builds import BuildPlan

FORMAT = "imgbuild-receipt/1"
KEEP = 32  # receipts kept, newest first: one per selection and option set a user builds
INPUTS_LABEL = "imgbuild.inputs"  # plan/labels.py INPUTS, not imported: that module loads the plan's types
PROJECT_FILES = ("patches", "images", "images.lock")  # what Project.load and the lock read, under the root


@dataclass(frozen=True)
class Key:
    """The receipt's name: a digest of what decides the plan, and where the receipts are."""

    digest: str
    where: Path

    @property
    def path(self) -> Path:
        return self.where / f"{self.digest}.json"


@dataclass(frozen=True)
class Kept:
    """One image of a receipt: what the build made of it, and the base it was made on."""

    variant: str
    platform: str
    image_id: str
    immutable: str
    moving: tuple[str, ...]
    inputs_digest: str
    index: str  # the multi-platform image it is part of, and its ref ("" for a one-platform variant)
    index_ref: str
    base_ref: str
    base_id: str

    @classmethod
    def read(cls, rec: object) -> Kept:
        """A record as written by `keep`; TypeError or ValueError for anything else."""
        if not isinstance(rec, dict):
            raise TypeError(f"not a record: {rec!r}")
        kept = cls(**{**rec, "moving": tuple(rec.get("moving", ()))})
        if not all(isinstance(v, str) for v in (*astuple(kept)[:4], *astuple(kept)[5:], *kept.moving)):
            raise ValueError(f"not a record: {rec!r}")
        return kept


def key(
    root: Path, variants: Sequence[str] | None, platform: str | None, options: BuildOptions, cache: Path
) -> Key | None:
    """The key of this build, or None when no receipt may answer it (`--force`, `--builder`)."""
    if options.force or options.builder:
        return None
    h = hashlib.sha256()
    what: dict[str, object] = {"format": FORMAT, "root": str(root.resolve()), "variants": list(variants or [])}
    what |= {"platform": platform, "base": options.base, "repository": options.repository, "smoke": options.smoke}
    what |= {"git": _git(root)}
    h.update(json.dumps(what, sort_keys=True).encode())
    for name in PROJECT_FILES:
        top = root / name
        for path in sorted(top.rglob("*")) if top.is_dir() else [top]:
            if path.is_file():
                h.update(f"\0{path.relative_to(root).as_posix()}\0".encode())
                h.update(path.read_bytes())
    code = Path(imgbuild.__file__).parent  # imgbuild itself: an upgrade or an edit plans differently
    for path in sorted(code.rglob("*.py")):
        st = path.stat()
        h.update(f"\0{path.relative_to(code).as_posix()} {st.st_size} {st.st_mtime_ns}".encode())
    return Key(h.hexdigest(), cache / "receipts")


def _git(root: Path) -> list[str]:
    """HEAD and origin, which the images' revision and source labels (and so their inputs) carry."""
    out = []
    for args in (["rev-parse", "HEAD"], ["config", "--get", "remote.origin.url"]):
        done = proc.run(["git", "-C", str(root), *args], text=True)
        out.append(done.stdout.strip() if done.returncode == 0 else "")
    return out


def keep(receipt: Key, plan: BuildPlan, result: BuildResult) -> None:
    """Write the receipt of a finished build (every image tagged; with smoke, its moving tags moved)."""
    bases = {(ib.variant, ib.platform): ib.base for ib in plan.images}
    images = []
    for img in result.images:
        base = bases[(img.variant, img.platform)]
        kept = Kept(img.variant, str(img.platform), img.image_id, img.immutable, tuple(img.moving),
                    img.inputs_digest, img.index, img.index_ref, base.ref, base.image_id)  # fmt: skip
        images.append(asdict(kept))
    try:
        write_json(receipt.path, {"format": FORMAT, "images": images})
        for old in sorted(receipt.where.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)[KEEP:]:
            old.unlink(missing_ok=True)
    except OSError:  # a read-only or full cache: the next build plans again
        return


def reuse(engine: Engine, receipt: Key, options: BuildOptions, say: Say) -> BuildResult | None:
    """What the kept build made, when the engine still holds all of it as it was; None otherwise."""
    with engine.reads_kept():  # a base two images share is asked about once
        return _reuse(engine, receipt, options, say)


def _reuse(engine: Engine, receipt: Key, options: BuildOptions, say: Say) -> BuildResult | None:
    try:
        doc = json.loads(receipt.path.read_text())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            return None
        records = [Kept.read(rec) for rec in doc["images"]]
    except (OSError, ValueError, TypeError, KeyError):  # gone, or not a receipt this imgbuild wrote: plan again
        return None
    result = BuildResult()
    lines: list[str] = []
    after: list[str] = []  # as the runner says them: every reuse, then each image's tags
    for rec in records:
        info, base = engine.image(rec.immutable), engine.image(rec.base_ref)
        if info is None or info.id != rec.image_id or info.labels.get(INPUTS_LABEL) != rec.inputs_digest:
            return None
        if base is None or base.id != rec.base_id:
            return None
        joined = engine.image(rec.index_ref) if rec.index_ref else None
        if rec.index_ref and (joined is None or joined.id != rec.index):
            return None
        target = rec.index or rec.image_id
        named = [engine.image(ref) for ref in rec.moving]
        if options.smoke and any(getattr(tagged, "id", None) != target for tagged in named):
            return None  # a moving tag moved (a rollback, another build): the build smoke-tests and moves it back
        if any(tagged is not None and INPUTS_LABEL not in tagged.labels for tagged in named):
            return None  # a foreign image under a moving tag: the build refuses it (runner.check_collisions)
        note = "" if options.smoke else "not smoke-tested (--no-smoke): moving tags left alone"
        image = ImageBuilt(
            rec.variant, Platform.parse(rec.platform), rec.image_id, rec.immutable, rec.moving, rec.inputs_digest,
            built=False, moved=False, layers=info.layers, base_layers=len(base.layers), index=rec.index,
            index_ref=rec.index_ref, note=note,
        )  # fmt: skip
        result.images.append(image)
        lines.append(reused(image.variant, image.immutable, image.inputs_digest))
        done = up_to_date(image.variant, image.platform, rec.moving, image.index_ref)
        after.append(f"{image.variant}: {note}" if note else done)
    say(f"nothing changed since this build last ran ({receipt.path.name[:12]}): the engine holds each image")
    for line in (*lines, *after):
        say(line)
    return result


def build(
    connect: Callable[[], Engine],
    root: Path,
    variants: Sequence[str] | None,
    platform: str | None,
    options: BuildOptions,
    say: Say,
    on_smoke: OnSmoke | None = None,
) -> BuildResult:
    """`imgbuild build`: what the receipt of this build says, when the engine agrees; else the whole build (the
    project loaded, its headers checked and the selection made before the engine is asked, builder/runner.py),
    which keeps a new receipt."""
    kept = key(root, variants, platform, options, cache_dir())
    engine = connect() if kept is not None and kept.path.is_file() else None
    found = reuse(engine, kept, options, say) if engine is not None and kept is not None else None
    if found is not None:
        return found
    from imgbuild.builder import runner
    from imgbuild.project import Project

    project = Project.load(root)
    project.refuse_bad_headers()
    selection = project.select(variants, platform)
    done = (lambda plan, result: keep(kept, plan, result)) if kept is not None else None
    return runner.build(engine or connect(), project, selection, options, say, on_smoke, done=done)
