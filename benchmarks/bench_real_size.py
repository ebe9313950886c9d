"""Issue 21's benchmarks at real size: imgbuild on the runtime base (torch + the pinned vLLM, ~9.5 GB), amd64 native.

    python3 benchmarks/bench_real_size.py [--pairs edit noop smoke first] [--rounds 5] [--smoke-rounds 3]
        [--first-rounds 3] [--old-first-rounds 1] [--out benchmarks/results/issue21-real-size.txt]
    python3 benchmarks/bench_real_size.py --check    # the pure parts only: no docker, nothing built

Three contenders, each pair interleaved round after round in one run (bench_pairs.interleave's
order: forward on even rounds, reversed on odd ones; with three contenders the same rule):

- NEW: this branch's code (`--new-src`, default ROOT/src) on a throwaway clone of this repository at HEAD;
- OLD: the tree before issue 21 (`--old-src`, default /work/old/src: `git worktree add /work/old ad15516`)
  on a clone at ad15516 (its patches/ and images/ are this branch's);
- HAND: what a user would write: each pinned release's tree copied out once (`git archive` of imgbuild's
  mirror at the pinned commit: vLLM, and FlashInfer since issue 26) and a work copy of those trees made once
  (`cp -al`), both untimed; then on every run one `cp` puts the patched files back from the release trees,
  the whole series is applied with ONE `git apply` per tree (that pin's patches in series order), then two
  `docker buildx build --load` of the seed's Dockerfiles (latest: FROM the base, COPY each patched file from
  the work copy, FlashInfer's from a named build context, ENTRYPOINT [] CMD []; engram-mem: FROM latest,
  COPY the three original Engram files from the release tree itself, ENTRYPOINT [] CMD []). Copying the
  trees on every run would cost HAND 8-13 s here (843 MB, 22k entries), so it copies them once. Before
  issue 36 HAND ran `git checkout -f` of a clone and one `git apply` per patch, and put the Engram files
  back with a checkout.
- HAND1-3 (edit pair only), stronger hand pipelines on HAND's steps: HAND1 copies the patched files into a
  staging directory laid out as site-packages and builds one `COPY . SITE/` layer per image (two buildx);
  HAND2 builds HAND's Dockerfiles with one `docker buildx bake` (engram-mem FROM target:latest); HAND3 builds
  HAND1's with one bake.

Pairs:

- edit: one added comment line of 0001's patch gets a new suffix before every run (a different
  text per contender and run, so each run is a real change and no contender hits another's
  BuildKit cache), then both variants rebuilt `--no-smoke` (HAND: cp of the patched files, one git apply
  per tree, 2x buildx). BuildKit cache warm on every side. Target NEW <= 1.2x HAND.
- noop: `build latest engram-mem --base runtime --no-smoke` with nothing changed, under IMGBUILD_ECHO=1:
  the `buildx build` lines must be 0; the echoed docker lines are counted as engine reads and writes.
  NEW against OLD. Then --proxy-rounds untimed runs with DOCKER_HOST on a logging proxy of the engine's
  socket (engine_proxy.py): every API request that reached the engine, against the lines echoed.
- smoke: `imgbuild smoke latest --base runtime` (NEW, and OLD unless --no-old) against one bare
  `docker run --rm --entrypoint python3 IMAGE -c "import vllm, <the 8 patched modules>"`. One
  untimed bare run first (page cache). Target NEW <= --smoke-target x bare (issue 34: 1.15; issue 21: 1.3).
- first: both variants `--no-smoke` on a base never built on: before every contender's run a new
  base (`FROM <runtime base>` + `LABEL`, a new image id) and `docker buildx prune -af` (not with --no-prune,
  for a shared daemon: the new base id alone keeps every step above FROM from hitting); OLD's
  OCI layout cache is emptied too (a new release's layers are not in it) and measured after.
  NEW's extra disk: `du` of its cache before/after. Against HAND and HAND3 (the strongest hand side of the
  edit pair, on the same new base). Target NEW <= 1.2x HAND (and HAND3, in a note).

NEW and OLD each get their own IMGBUILD_CACHE under the work directory, whose wheels/, mirrors/,
runtime/ and skeleton/ are links to the user's cache (same downloads on both sides); their own
parts (OLD's oci-layout, the drift-check records) start empty and warm up in the untimed first
run of each pair. Images go under IMGBUILD_BENCH_REPOSITORY-{new,old,hand,base}/... and are removed
at the end, as is the work directory.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "src"))

from bench_pairs import load, seconds, spread  # noqa: E402

PREFIX = os.environ.get("IMGBUILD_BENCH_REPOSITORY", "imgbuild-bench-real")
PLATFORM = "linux/amd64"
OLD_REV = "ad15516"
EDIT_PATCH = "0001-sm12x-attention-page-sizes.patch"
SHARED_CACHE_PARTS = ("wheels", "mirrors", "runtime", "skeleton")


def user_cache() -> Path:
    if os.environ.get("IMGBUILD_CACHE"):
        return Path(os.environ["IMGBUILD_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild"


# -- pure parts (--check runs these without docker) ---------------------------------------------
def patched_paths(patch_text: str) -> list[str]:
    """The files a patch writes, from its `+++ b/` headers."""
    return [line[len("+++ b/") :].strip() for line in patch_text.splitlines() if line.startswith("+++ b/")]


def module_name(path: str) -> str:
    """vllm/a/b.py -> vllm.a.b (vllm/a/__init__.py -> vllm.a)."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def edit_line_index(patch_text: str) -> int:
    """The first added comment line of a patch: a suffix there keeps the patch applying."""
    for i, line in enumerate(patch_text.split("\n")):
        if line.startswith("+") and not line.startswith("+++") and line[1:].lstrip().startswith("#"):
            return i
    raise SystemExit("no added comment line to edit")


def edited(patch_text: str, index: int, mark: str) -> str:
    lines = patch_text.split("\n")
    lines[index] = f"{lines[index]} [bench edit {mark}]"
    return "\n".join(lines)


def dockerfile(base: str, files: list[str], site: str, first_root: str = "vllm") -> str:
    """The seed's Dockerfile: FROM, one COPY per file from the work tree (a further pin's file from its
    own tree, a named build context), ENTRYPOINT [] CMD []."""
    copies = [
        f"COPY {'' if p.split('/')[0] == first_root else f'--from={p.split(chr(47))[0]} '}{p} {site}/{p}" for p in files
    ]
    return "\n".join([f"FROM {base}", *copies, "ENTRYPOINT []", "CMD []", ""])


def echo_counts(stderr: str) -> tuple[int, int]:
    """(docker operations, `buildx build` calls) in an IMGBUILD_ECHO=1 stderr."""
    ops = [line for line in stderr.splitlines() if line.startswith("+ docker")]
    return len(ops), sum("buildx build" in line for line in ops)


READS = ("docker version", "docker info", "docker image inspect", "docker images", "docker ps",
         "docker buildx imagetools inspect", "docker context inspect")  # fmt: skip


def echo_kinds(stderr: str) -> dict[str, list[str]]:
    """An IMGBUILD_ECHO=1 stderr's docker lines as reads and writes (anything not a read: tag, rmi, rm, run,
    create, cp, build, push, imagetools create), each line's command without its arguments' values."""
    out: dict[str, list[str]] = {"reads": [], "writes": []}
    for line in stderr.splitlines():
        if not line.startswith("+ docker"):
            continue
        cmd = line[2:]
        kind = "reads" if cmd.startswith(READS) else "writes"
        out[kind].append(cmd)
    return out


def api_kinds(requests: list[str]) -> dict[str, list[str]]:
    """Engine API requests (`METHOD /path`) as reads (GET, HEAD) and writes (the rest)."""
    reads = [r for r in requests if r.split()[0] in ("GET", "HEAD")]
    return {"reads": reads, "writes": [r for r in requests if r not in reads]}


# -- processes ------------------------------------------------------------------------------------
def sh(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    input: str | None = None,
    ok: tuple[int, ...] = (0,),
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=env, cwd=cwd, input=input, capture_output=True, text=True, check=False)
    if proc.returncode not in ok:
        tail = (proc.stderr or proc.stdout)[-1500:]
        raise SystemExit(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{tail}")
    return proc


def sh_bytes(cmd: list[str], input_bytes: bytes | None = None) -> bytes:
    proc = subprocess.run(cmd, input=input_bytes, capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(
            f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')[-1500:]}"
        )
    return proc.stdout


def runs(cmd: list[str], env: dict[str, str] | None = None) -> Callable[[], None]:
    """A contender's step: run cmd, fail loudly."""

    def go() -> None:
        sh(cmd, env=env)

    return go


def du(path: Path) -> int:
    """Bytes under path (links not followed: the shared cache parts do not count)."""
    if not path.exists():
        return 0
    return int(sh(["du", "-sb", str(path)]).stdout.split()[0])


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def NOTHING() -> None:
    """The default untimed step: none."""


@dataclass
class Contender:
    label: str
    fn: Callable[[], None]
    prep: Callable[[], None] = NOTHING  # untimed, before each run
    post: Callable[[], None] = NOTHING  # untimed, after each run
    limit: int | None = None  # at most this many timed runs (OLD's first build is slow)
    times: list[float] = field(default_factory=list)
    warm: float | None = None  # the untimed warm run's seconds, where interleave_all timed it
    failures: int = 0  # attempts that failed with TRANSIENT and were run again (timed)


TRANSIENT = "failed to solve: not found"  # BuildKit on this shared daemon, now and then, on either side (see timed)
ATTEMPTS = 8


def timed(c: Contender) -> float:
    """One run of `c` (its prep and post around it, untimed). A run that fails with TRANSIENT is recorded in
    `c.failures` and run again from its prep (a new edit: a whole rebuild, not the half a failed run left); the
    failed attempt's time is not kept. `docker buildx build` alone fails this way on this daemon too (3 of 12
    builds in a loop on the runtime base during issue 36's runs), so it is not imgbuild's."""
    for attempt in range(ATTEMPTS):
        c.prep()
        try:
            t = seconds(c.fn)
        except SystemExit as exc:
            if TRANSIENT not in str(exc) or attempt == ATTEMPTS - 1:
                raise
            c.failures += 1
            time.sleep(5)
            continue
        c.post()
        return t
    raise AssertionError("unreachable")


def interleave_all(cs: list[Contender], rounds: int, *, warm: bool) -> None:
    """bench_pairs.interleave's order for N contenders (an untimed warm run each, then forward/reversed rounds),
    each run through `timed`."""
    if warm:
        for c in cs:
            c.warm = timed(c)
    for i in range(rounds):
        for c in cs if i % 2 == 0 else list(reversed(cs)):
            if c.limit is not None and len(c.times) >= c.limit:
                continue
            c.times.append(timed(c))


@dataclass
class Row:
    pair: str
    cs: list[Contender]
    ref: Contender  # the ratio's denominator
    target: float | None  # NEW / ref at most this
    notes: list[str] = field(default_factory=list)


# -- the bench ------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="bench-real-size-", dir=args.work_parent))
        self.facts: list[str] = []
        self.notes: list[str] = []
        self.repo = {who: f"{PREFIX}-{who}/vllm-dsv41" for who in ("new", "old", "hand", "hand1", "hand2", "hand3")}
        self.imgbuilds = ["new"] if args.no_old else ["new", "old"]  # the imgbuild contenders of edit and noop
        self.base_repo = f"{PREFIX}-base/runtime"
        self.py = sys.executable

    # setup ------------------------------------------------------------------------------------------
    def setup(self) -> None:
        w = self.work
        sh(["git", "clone", "-q", str(ROOT), str(w / "new")])
        rev = sh(["git", "-C", str(w / "new"), "log", "-1", "--format=%h %s"]).stdout.strip()
        self.facts.append(f"NEW's project: a clone of {ROOT} at {rev[:90]}")
        sh(["git", "clone", "-q", "--no-checkout", str(ROOT), str(w / "old")])
        sh(["git", "-C", str(w / "old"), "checkout", "-q", self.args.old_rev])
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "IMGBUILD_ECHO")}
        env["PYTHONPYCACHEPREFIX"] = str(w / "pycache")  # warm bytecode, as an installed package has
        self.env: dict[str, dict[str, str]] = {}
        for who, src in (("new", self.args.new_src), ("old", self.args.old_src)):
            cache = w / f"cache-{who}"
            cache.mkdir()
            for part in SHARED_CACHE_PARTS:
                (user_cache() / part).mkdir(parents=True, exist_ok=True)
                (cache / part).symlink_to(user_cache() / part)
            self.env[who] = {**env, "PYTHONPATH": str(src), "IMGBUILD_CACHE": str(cache)}
        self.base_env = {**self.env["new"], "IMGBUILD_CACHE": str(user_cache())}

        from imgbuild.project import Project

        project = Project.load(w / "new")
        self.series = [p.filename for p in project.patches]
        self.pin_of = {p.filename: project.upstream_of(p).name for p in project.patches}
        latest = project.plan(["latest"])[0]
        mem = project.plan(["engram-mem"])[0]
        self.site = latest.variant.image.site_packages or "/usr/local/lib/python3.12/dist-packages"
        self.latest_files = [f.path for f in latest.files]
        self.originals = [f.path for f in mem.files if f.state == "original"]
        headers = [p for name in self.series for p in patched_paths((w / "new/patches" / name).read_text())]
        self.modules = sorted({module_name(p) for p in headers})
        # HAND: each pin's release tree copied out once (hand/release/<pin>, `git archive` of the mirror at the pinned
        # commit) and a work copy of them (hand/ctx, `cp -al`: hard links), untimed; its own copy of the patches
        hand = w / "hand"
        hand.mkdir()
        shutil.copytree(w / "new/patches", hand / "patches")
        self.pins = {pin.name: (project.resolved(pin.name).commit, pin.package_root) for pin in project.pins}
        self.first_pin = project.pin.name
        for pin in project.pins:
            tree = hand / "release" / pin.name
            tree.mkdir(parents=True)
            up = project.resolved(pin.name)
            archive = sh_bytes(["git", "-C", str(up.repo.path), "archive", "--format=tar", up.commit])
            sh_bytes(["tar", "-x", "-C", str(tree)], archive)
        t0 = time.monotonic()
        sh(["cp", "-al", str(hand / "release"), str(hand / "ctx")])
        copy_s = time.monotonic() - t0
        self.series_of = {pin: [n for n in self.series if self.pin_of[n] == pin] for pin in self.pins}
        self.touched = [
            f"{self.pin_of[n]}/{q}" for n in self.series for q in patched_paths((hand / "patches" / n).read_text())
        ]
        files = sum(1 for _ in (hand / "release").rglob("*"))
        self.facts.append(
            f"HAND's release trees, copied out once (untimed): {', '.join(self.pins)}, {files} entries, "
            f"{gb(du(hand / 'release'))}; their work copy: cp -al, {copy_s:.1f} s once (cp -a: 8-13 s, rm -rf: 3-5 s "
            f"at this load, so no run copies the trees); each run: one cp of the {len(self.touched)} patched files "
            f"back from the release, one git apply per tree "
            f"({', '.join(f'{p}: {len(s)} patches' for p, s in self.series_of.items())}), 2 buildx"
        )
        self.patch_text = (w / "new/patches" / EDIT_PATCH).read_text()
        self.edit_index = edit_line_index(self.patch_text)
        self.edits = {"new": 0, "old": 0, "hand": 0, "hand1": 0, "hand2": 0, "hand3": 0}
        self.hand_steps: list[list[float]] = []  # seconds of each HAND run's steps: cp, git apply, latest, engram-mem
        self.facts.append(f"patched modules ({len(self.modules)}): {', '.join(self.modules)}")
        self.facts.append(f"engram originals: {', '.join(self.originals)}")
        self.facts.append(
            f"edited line ({EDIT_PATCH}:{self.edit_index + 1}): {self.patch_text.split(chr(10))[self.edit_index]}"
        )

    def runtime_base(self) -> None:
        """Build (or find) the runtime base with NEW's code and the user's cache; untimed.

        Without --json: on ee662ed `skeleton --runtime --json` fails after the build (a Platform in the JSON)."""
        t0 = time.monotonic()
        cmd = self.imgbuild("new", "skeleton", "--runtime", "--platform", PLATFORM)
        self.runtime = sh(cmd, env=self.base_env).stdout.split()[-1]
        fmt = "{{.Id}} {{.Size}}"
        image_id, size = sh(["docker", "image", "inspect", "--format", fmt, self.runtime]).stdout.split()
        self.facts.append(
            f"runtime base: {self.runtime} {image_id[:19]} ({int(size) / 1e9:.1f} GB per docker image inspect), "
            f"ready in {time.monotonic() - t0:.1f} s"
        )

    # commands -------------------------------------------------------------------------------------
    def imgbuild(self, who: str, *args: str) -> list[str]:
        return [self.py, "-m", "imgbuild", "-C", str(self.work / who), *args]

    def build_cmd(self, who: str, base: str, *extra: str) -> list[str]:
        return self.imgbuild(
            who,
            "build",
            "latest",
            "engram-mem",
            "--base",
            base,
            "--platform",
            PLATFORM,
            "--repository",
            self.repo[who],
            *extra,
        )

    def smoke_cmd(self, who: str) -> list[str]:
        return self.imgbuild(
            who, "smoke", "latest", "--base", "runtime", "--platform", PLATFORM, "--repository", self.repo[who]
        )

    def smoker(self, who: str, failing: dict[str, str]) -> Callable[[], None]:
        """imgbuild smoke; exit 8 (a check failed) is timed too and its reason kept."""

        def go() -> None:
            proc = sh(self.smoke_cmd(who), env=self.env[who], ok=(0, 8))
            if proc.returncode == 8:
                lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if "fail" in ln.lower()]
                failing[who] = " | ".join(lines[:3])[:400]

        return go

    def set_edit(self, who: str) -> None:
        self.edits[who] += 1
        path = self.work / who / "patches" / EDIT_PATCH
        path.write_text(edited(self.patch_text, self.edit_index, f"{who} {self.edits[who]}"))

    def buildx(self, dockerfile_path: Path, tag: str, trees: Path) -> None:
        sh(
            [
                "docker",
                "buildx",
                "build",
                "--platform",
                PLATFORM,
                "--load",
                "-q",
                "-f",
                str(dockerfile_path),
                "-t",
                tag,
                *(
                    f"--build-context={root}={trees / name}"
                    for name, (_, root) in self.pins.items()
                    if name != self.first_pin
                ),
                str(trees / self.first_pin),
            ]
        )

    def write_hand_dockerfiles(self, base: str) -> None:
        hand = self.work / "hand"
        first_root = self.pins[self.first_pin][1]
        (hand / "latest.Dockerfile").write_text(dockerfile(base, self.latest_files, self.site, first_root))
        mem_base = f"{self.repo['hand']}:latest"
        (hand / "engram-mem.Dockerfile").write_text(dockerfile(mem_base, self.originals, self.site, first_root))

    def hand(self) -> None:
        """The patched files put back from the release trees (one `cp`; a new file each, so the hard-linked release
        stays as it is), the whole series applied with one `git apply` per tree, latest built from the work copy,
        engram-mem from the release trees themselves (its three files are the originals there: nothing to put
        back)."""
        hand = self.work / "hand"
        steps: list[float] = [time.perf_counter()]
        sh(["cp", "--parents", "--remove-destination", *self.touched, str(hand / "ctx")], cwd=hand / "release")
        steps.append(time.perf_counter())
        for pin, names in self.series_of.items():
            if names:
                sh(["git", "-C", str(hand / "ctx" / pin), "apply", *(str(hand / "patches" / n) for n in names)])
        steps.append(time.perf_counter())
        self.buildx(hand / "latest.Dockerfile", f"{self.repo['hand']}:latest", hand / "ctx")
        steps.append(time.perf_counter())
        self.buildx(hand / "engram-mem.Dockerfile", f"{self.repo['hand']}:engram-mem", hand / "release")
        steps.append(time.perf_counter())
        self.hand_steps.append([b - a for a, b in itertools.pairwise(steps)])

    def setup_hand1(self, who: str = "hand1") -> None:
        """HAND1 (HAND3), untimed: its own patches and work copy of the release trees (cp -al), a staging directory
        laid out as site-packages for latest's files, one of the three Engram originals for engram-mem (they never
        change), and two Dockerfiles of one `COPY . SITE/` each: one layer per image, as few as imgbuild's. HAND3's
        engram-mem is `FROM latest` (bake's `target:latest`), and a bake file builds both."""
        h1 = self.work / who
        h1.mkdir()
        shutil.copytree(self.work / "new/patches", h1 / "patches")
        sh(["cp", "-al", str(self.work / "hand/release"), str(h1 / "ctx")])
        (h1 / "stage").mkdir()
        (h1 / "stage-mem").mkdir()
        sh(["cp", "--parents", *self.originals, str(h1 / "stage-mem")], cwd=self.work / "hand/release" / self.first_pin)
        self.write_hand1_dockerfiles(who, self.runtime)
        common = {"platforms": [PLATFORM], "output": ["type=docker"]}
        bake = {
            "target": {
                "latest": {"context": str(h1 / "stage"), "dockerfile": str(h1 / "latest.Dockerfile"),
                           "tags": [f"{self.repo[who]}:latest"], **common},
                "engram-mem": {"context": str(h1 / "stage-mem"), "dockerfile": str(h1 / "engram-mem.Dockerfile"),
                               "contexts": {"latest": "target:latest"}, "tags": [f"{self.repo[who]}:engram-mem"],
                               **common},
            }
        }  # fmt: skip
        (h1 / "bake.json").write_text(json.dumps(bake, indent=1))

    def write_hand1_dockerfiles(self, who: str, base: str) -> None:
        """HAND1's (HAND3's) two one-layer Dockerfiles, latest FROM `base`."""
        h1 = self.work / who
        tail = ["ENTRYPOINT []", "CMD []", ""]
        (h1 / "latest.Dockerfile").write_text("\n".join([f"FROM {base}", f"COPY . {self.site}/", *tail]))
        mem_base = "latest" if who == "hand3" else f"{self.repo[who]}:latest"
        (h1 / "engram-mem.Dockerfile").write_text("\n".join([f"FROM {mem_base}", f"COPY . {self.site}/", *tail]))

    def hand1(self, who: str = "hand1") -> None:
        """HAND's steps, then the patched files copied into the staging directory (one `cp --parents` per tree) and
        one `COPY .` per image: two buildx builds (HAND1), or one bake of both (HAND3)."""
        h1, release = self.work / who, self.work / "hand/release"
        sh(["cp", "--parents", "--remove-destination", *self.touched, str(h1 / "ctx")], cwd=release)
        for pin, names in self.series_of.items():
            if names:
                sh(["git", "-C", str(h1 / "ctx" / pin), "apply", *(str(h1 / "patches" / n) for n in names)])
        for pin in self.series_of:
            files = [t.split("/", 1)[1] for t in self.touched if t.split("/", 1)[0] == pin]
            if files:
                sh(["cp", "--parents", "--remove-destination", *files, str(h1 / "stage")], cwd=h1 / "ctx" / pin)
        if who == "hand3":
            sh(["docker", "buildx", "bake", "-f", str(h1 / "bake.json"), "--progress", "quiet", "latest", "engram-mem"])
            return
        for image, context in (("latest", "stage"), ("engram-mem", "stage-mem")):
            sh(["docker", "buildx", "build", "--platform", PLATFORM, "--load", "-q", "-f",
                str(h1 / f"{image}.Dockerfile"), "-t", f"{self.repo[who]}:{image}", str(h1 / context)])  # fmt: skip

    def setup_hand2(self) -> None:
        """HAND2, untimed: its own patches and work copy (cp -al), the seed's two Dockerfiles (engram-mem's `FROM
        latest` names bake's `target:latest` context, not a local image) and a bake file of both targets."""
        h2 = self.work / "hand2"
        h2.mkdir()
        shutil.copytree(self.work / "new/patches", h2 / "patches")
        sh(["cp", "-al", str(self.work / "hand/release"), str(h2 / "ctx")])
        first_root = self.pins[self.first_pin][1]
        (h2 / "latest.Dockerfile").write_text(dockerfile(self.runtime, self.latest_files, self.site, first_root))
        (h2 / "engram-mem.Dockerfile").write_text(dockerfile("latest", self.originals, self.site, first_root))
        others = {root: str(h2 / "ctx" / name) for name, (_, root) in self.pins.items() if name != self.first_pin}
        common = {"platforms": [PLATFORM], "output": ["type=docker"]}
        bake = {
            "target": {
                "latest": {
                    "context": str(h2 / "ctx" / self.first_pin),
                    "dockerfile": str(h2 / "latest.Dockerfile"),
                    "contexts": others,
                    "tags": [f"{self.repo['hand2']}:latest"],
                    **common,
                },
                "engram-mem": {
                    "context": str(self.work / "hand/release" / self.first_pin),
                    "dockerfile": str(h2 / "engram-mem.Dockerfile"),
                    "contexts": {"latest": "target:latest"},
                    "tags": [f"{self.repo['hand2']}:engram-mem"],
                    **common,
                },
            }
        }
        (h2 / "bake.json").write_text(json.dumps(bake, indent=1))

    def hand2(self) -> None:
        """HAND's steps, then one `docker buildx bake` of both images (one process, one BuildKit session)."""
        h2, release = self.work / "hand2", self.work / "hand/release"
        sh(["cp", "--parents", "--remove-destination", *self.touched, str(h2 / "ctx")], cwd=release)
        for pin, names in self.series_of.items():
            if names:
                sh(["git", "-C", str(h2 / "ctx" / pin), "apply", *(str(h2 / "patches" / n) for n in names)])
        sh(["docker", "buildx", "bake", "-f", str(h2 / "bake.json"), "--progress", "quiet", "latest", "engram-mem"])

    def hand_label(self) -> str:
        return f"HAND: cp {len(self.touched)} files, {len(self.series_of)}x git apply (series), 2x buildx --load"

    # pairs --------------------------------------------------------------------------------------
    def pair_edit(self) -> Row:
        self.write_hand_dockerfiles(self.runtime)

        def imgbuild_side(who: str) -> Contender:
            return Contender(
                f"{who.upper()}: build latest engram-mem --no-smoke",
                runs(self.build_cmd(who, "runtime", "--no-smoke"), self.env[who]),
                prep=lambda: self.set_edit(who),
            )

        sides = [imgbuild_side(who) for who in self.imgbuilds]
        hand = Contender(
            self.hand_label(),
            self.hand,
            prep=lambda: self.set_edit("hand"),
        )
        self.setup_hand1()
        hand1 = Contender(
            f"HAND1: as HAND, then cp {len(self.touched)} files to a staging dir, 1 COPY layer per image",
            self.hand1,
            prep=lambda: self.set_edit("hand1"),
        )
        self.setup_hand2()
        hand2 = Contender(
            "HAND2: as HAND, then 1 buildx bake of both (engram-mem FROM target:latest)",
            self.hand2,
            prep=lambda: self.set_edit("hand2"),
        )
        self.setup_hand1("hand3")
        hand3 = Contender(
            "HAND3: as HAND1, then 1 buildx bake of both (engram-mem FROM target:latest)",
            lambda: self.hand1("hand3"),
            prep=lambda: self.set_edit("hand3"),
        )
        t0 = time.monotonic()
        interleave_all([*sides, hand, hand1, hand2, hand3], self.args.rounds, warm=True)
        notes = [f"pair wall time {time.monotonic() - t0:.0f} s (warm runs included)"]
        steps = self.hand_steps[-len(hand.times) :]
        names = ("cp", "git apply", "buildx latest", "buildx engram-mem")
        notes.append(
            "HAND's steps, median of the timed runs: "
            + ", ".join(f"{n} {statistics.median(x[i] for x in steps):.2f} s" for i, n in enumerate(names))
        )
        notes += [
            f"untimed warm run (the first build on the runtime base): {c.label}: {c.warm:.1f} s"
            for c in (*sides, hand, hand1, hand2, hand3)
            if c.warm is not None
        ]
        new_med = statistics.median(sides[0].times)
        for c in (hand1, hand2, hand3):
            r = new_med / statistics.median(c.times)
            notes.append(
                f"NEW against {c.label.split(':')[0]}: {r:.2f}x (target 1.2x: {'ok' if r <= 1.2 else 'MISSES'})"
            )
        if "old" in self.imgbuilds:
            notes.append(f"OLD's oci-layout after the edit pair: {gb(du(self.work / 'cache-old' / 'oci-layout'))}")
        return Row("edit", [*sides, hand, hand1, hand2, hand3], hand, 1.2, notes)

    def pair_noop(self) -> Row:
        """--no-smoke on both sides: the edit pair's builds were --no-smoke, so their moving tags never moved,
        and only a --no-smoke build is a no-op after them. Then, untimed: what reached the engine in one run, through
        a logging proxy on its socket (every request, whoever sent it), beside what IMGBUILD_ECHO=1 printed."""
        notes = ["both with --no-smoke, as the edit pair's builds before them (a build with smoke would move tags)"]
        for who in self.imgbuilds:  # nothing changed since the edit pair's last build: a no-op already
            timed(Contender(who, runs(self.build_cmd(who, "runtime", "--no-smoke"), self.env[who])))
        counts: dict[str, list[tuple[int, int]]] = {"new": [], "old": []}
        echoed: dict[str, list[dict[str, list[str]]]] = {"new": [], "old": []}

        def side(who: str) -> Contender:
            def fn() -> None:
                proc = sh(self.build_cmd(who, "runtime", "--no-smoke"), env={**self.env[who], "IMGBUILD_ECHO": "1"})
                counts[who].append(echo_counts(proc.stderr))
                echoed[who].append(echo_kinds(proc.stderr))

            return Contender(f"{who.upper()}: build latest engram-mem --no-smoke (no change)", fn)

        sides = [side(who) for who in self.imgbuilds]
        interleave_all(sides, self.args.rounds, warm=True)
        for who in self.imgbuilds:
            ops = sorted({c[0] for c in counts[who]})
            bx = sorted({c[1] for c in counts[who]})
            verdict = "ok" if bx == [0] else "MISSES"
            notes.append(
                f"{who.upper()} IMGBUILD_ECHO=1: docker lines per run {ops}, buildx build calls {bx} {verdict}"
            )
            kinds = {k: sorted({len(e[k]) for e in echoed[who]}) for k in ("reads", "writes")}
            last = echoed[who][-1]
            notes.append(
                f"{who.upper()} IMGBUILD_ECHO=1 per run: engine reads {kinds['reads']}, writes/builds "
                f"{kinds['writes']}; one run's lines: {'; '.join(last['reads'] + last['writes'])}"
            )
        from engine_proxy import EngineProxy

        with EngineProxy(self.work / "engine.sock") as proxy:
            for who in self.imgbuilds:
                seen = []
                for _ in range(self.args.proxy_rounds):
                    env = {**self.env[who], "IMGBUILD_ECHO": "1", "DOCKER_HOST": proxy.docker_host}
                    proc = sh(self.build_cmd(who, "runtime", "--no-smoke"), env=env)
                    time.sleep(0.2)  # the relay threads finish copying what the process sent
                    seen.append((api_kinds(proxy.reset()), echo_kinds(proc.stderr)))
                api, echo = seen[-1]
                reads = sorted({len(a["reads"]) for a, _ in seen})
                writes = sorted({len(a["writes"]) for a, _ in seen})
                lines = sorted({len(e["reads"]) + len(e["writes"]) for _, e in seen})
                notes.append(
                    f"{who.upper()} engine API requests at the socket (proxy, {len(seen)} untimed runs): reads "
                    f"{reads}, writes {writes}; echoed docker lines in the same runs: {lines}"
                )
                notes.append(f"{who.upper()} one run's requests: {'; '.join(api['reads'] + api['writes'])}")
                self.noop_counts = (api, echo)
        return Row("noop", sides, sides[-1], None, notes)  # the reference: OLD, or NEW itself without OLD

    def pair_smoke(self) -> Row:
        images = {}
        for who in self.imgbuilds:  # each smokes the image its own build made (before run 11, OLD had none: exit 8)
            cmd = self.build_cmd(who, "runtime", "--no-smoke", "--json")
            out = sh(cmd, env=self.env[who]).stdout
            found = [i["immutable"] for i in json.loads(out)["images"] if i["variant"] == "latest"]
            if not found:
                raise SystemExit(f"{who}: no image named in the build's --json:\n{out[-800:]}")
            images[who] = found[0]
        image = images["new"]
        failing: dict[str, str] = {}
        bare_cmd = [
            "docker",
            "run",
            "--rm",
            "--entrypoint",
            "python3",
            image,
            "-c",
            "import vllm, " + ", ".join(self.modules),
        ]
        t = seconds(runs(bare_cmd))  # page cache for the base's layers, shared by all three
        cs = [
            Contender(
                f"{who.upper()}: smoke latest --base runtime",
                self.smoker(who, failing),
            )
            for who in self.imgbuilds
        ]
        bare = Contender(f"bare: docker run python3 -c 'import vllm, <{len(self.modules)} modules>'", runs(bare_cmd))
        interleave_all([*cs, bare], self.args.smoke_rounds, warm=False)
        notes = [f"bare command: {shlex.join(bare_cmd)}", f"untimed warm-up bare run: {t:.1f} s"]
        notes += [f"{who.upper()} smoke exited 8 (timed all the same): {why}" for who, why in failing.items()]
        return Row("smoke", [*cs, bare], bare, self.args.smoke_target, notes)

    def pair_first(self) -> Row:
        notes: list[str] = []
        serial = {"n": 0}
        current: dict[str, str] = {}
        cache_new = self.work / "cache-new"
        layout = self.work / "cache-old" / "oci-layout"
        sizes: dict[str, list[int]] = {"new": [], "old": []}

        def new_base(who: str) -> None:
            serial["n"] += 1
            tag = f"{self.base_repo}:{who}-{serial['n']}"
            df = f"FROM {self.runtime}\nLABEL imgbuild-bench.round={who}-{serial['n']}\n"
            sh(["docker", "buildx", "build", "--platform", PLATFORM, "--load", "-q", "-t", tag, "-"], input=df)
            if self.args.prune:
                sh(["docker", "buildx", "prune", "-af"])
            current[who] = tag

        def prep(who: str) -> Callable[[], None]:
            def go() -> None:
                new_base(who)
                if who == "hand":
                    self.write_hand_dockerfiles(current["hand"])
                if who == "hand3":
                    self.write_hand1_dockerfiles("hand3", current["hand3"])
                if who == "old":
                    shutil.rmtree(layout, ignore_errors=True)  # a new release's layers are not in it
                if who == "new":
                    sizes["new"].append(du(cache_new))

            return go

        def post_new() -> None:
            sizes["new"].append(du(cache_new))

        def post_old() -> None:
            sizes["old"].append(du(layout))
            shutil.rmtree(layout, ignore_errors=True)

        def side(who: str) -> Contender:
            return Contender(
                f"{who.upper()}: build latest engram-mem --no-smoke, new base",
                lambda: sh(self.build_cmd(who, current[who], "--no-smoke"), env=self.env[who]) and None,
                prep=prep(who),
                post=post_new if who == "new" else post_old,
                limit=self.args.old_first_rounds if who == "old" else None,
            )

        new, old = side("new"), side("old")
        cache = "cache pruned" if self.args.prune else "cache not pruned"
        hand = Contender(f"{self.hand_label()}, new base, {cache}", self.hand, prep=prep("hand"))
        if not (self.work / "hand3").exists():
            self.setup_hand1("hand3")
        hand3 = Contender(
            f"HAND3: staging dir, 1 COPY layer per image, 1 buildx bake, new base, {cache}",
            lambda: self.hand1("hand3"),
            prep=prep("hand3"),
        )
        sides = [new, old, hand, hand3] if self.args.old_first_rounds else [new, hand, hand3]
        interleave_all(sides, self.args.first_rounds, warm=False)
        if not self.args.prune:
            notes.append(
                "BuildKit's cache NOT pruned between runs (--no-prune: a shared daemon; `buildx prune -af` would empty "
                "other sessions' caches): every run is on a base image id never built on, so no step above FROM can "
                "hit; the build contexts' transfer cache is warm on every side alike"
            )
        r3 = statistics.median(new.times) / statistics.median(hand3.times)
        verdict = "ok" if r3 <= 1.2 else "MISSES"
        notes.append(f"NEW against HAND3 (the strongest hand side): {r3:.2f}x (target 1.2x: {verdict})")
        deltas = [sizes["new"][i + 1] - sizes["new"][i] for i in range(0, len(sizes["new"]) - 1, 2)]
        notes.append(
            f"NEW's cache ({cache_new}, links not followed) grew by {', '.join(gb(d) for d in deltas)} per run"
        )
        for s in sizes["old"]:
            notes.append(f"OLD's oci-layout after its first build on a new base: {gb(s)} (du -sb; deleted after)")
        self.first_new_disk = deltas
        return Row("first", sides, hand, 1.2, notes)

    # cleanup ------------------------------------------------------------------------------------
    def cleanup(self) -> None:
        out = subprocess.run(
            ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, check=False
        ).stdout
        tags = [t for t in out.split() if t.startswith(f"{PREFIX}-")]
        if tags:
            subprocess.run(["docker", "rmi", *tags], capture_output=True, check=False)
        shutil.rmtree(self.work, ignore_errors=True)


# -- report ---------------------------------------------------------------------------------------
def table(rows: list[Row]) -> list[str]:
    header = f"{'pair':<6} {'contender':<72} {'n':>2} {'median s':>9} {'min-max s':>15} {'ratio':>6} {'target':>7}"
    lines = [header, "-" * len(header)]
    for row in rows:
        ref = statistics.median(row.ref.times)
        for c in row.cs:
            med = statistics.median(c.times)
            ratio = f"{med / ref:6.2f}" if c is not row.ref else f"{'ref':>6}"
            target = ""
            if row.target is not None and c.label.startswith("NEW"):
                target = f"{row.target:5.1f}x " + ("ok" if med / ref <= row.target else "MISSES")
            lines.append(
                f"{row.pair:<6} {c.label:<72} {len(c.times):>2} {med:>9.2f} {spread(c.times):>15} {ratio} {target}"
            )
    return lines


def machine_facts(args: argparse.Namespace) -> list[str]:
    ver = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, check=False
    ).stdout.strip()
    bx = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True, check=False).stdout.strip()
    driver = subprocess.run(
        ["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True, check=False
    ).stdout.strip()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--short", "src"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return [
        f"machine: {platform.node()} {platform.machine()}, nproc {os.cpu_count()}, kernel {platform.release()}",
        f"docker {ver} (storage driver {driver}), {bx}",
        f"NEW: {ROOT} at {head}, src {'with uncommitted changes' if dirty else 'clean'}; OLD: {args.old_rev}",
    ]


def check() -> int:
    """The pure parts, without docker: modules, the edit, the Dockerfiles, echo counting."""
    patches = ROOT / "patches"
    series = [s for s in (patches / "series").read_text().splitlines() if s and not s.startswith("#")]
    paths = [p for name in series for p in patched_paths((patches / name).read_text())]
    modules = sorted({module_name(p) for p in paths})
    print("modules:", modules)
    assert len(modules) == 8 and all(m.startswith(("vllm.", "flashinfer.")) and "/" not in m for m in modules), modules
    df = dockerfile("b", ["vllm/a.py", "flashinfer/p.py"], "/s")
    assert "COPY vllm/a.py /s/vllm/a.py" in df and "COPY --from=flashinfer flashinfer/p.py /s/flashinfer/p.py" in df
    text = (patches / EDIT_PATCH).read_text()
    i = edit_line_index(text)
    a, b = edited(text, i, "new 1"), edited(text, i, "new 2")
    assert a != b and a.count("\n") == text.count("\n") and "[bench edit new 1]" in a.split("\n")[i]
    print("edit line:", a.split("\n")[i])
    from imgbuild.project import Project

    project = Project.load(ROOT)  # each pin's mirror of its release in the user's cache
    pin_of = {p.filename: project.upstream_of(p).name for p in project.patches}
    with tempfile.TemporaryDirectory() as tmp:  # HAND's steps: the edited series applies, one git apply per tree
        release, ctx = Path(tmp) / "release", Path(tmp) / "ctx"
        for pin in project.pins:
            up = project.resolved(pin.name)
            (release / pin.name).mkdir(parents=True)
            sh_bytes(["tar", "-x", "-C", str(release / pin.name)],
                     sh_bytes(["git", "-C", str(up.repo.path), "archive", "--format=tar", up.commit]))  # fmt: skip
        (Path(tmp) / EDIT_PATCH).write_text(a)
        touched = [f"{pin_of[n]}/{q}" for n in series for q in patched_paths((patches / n).read_text())]
        before = {t: (release / t).read_bytes() for t in touched}
        sh(["cp", "-al", str(release), str(ctx)])  # hard links: neither cp nor git apply may write through them
        for _ in range(2):  # HAND's run, twice: the files put back, then the series applied again
            sh(["cp", "--parents", "--remove-destination", *touched, str(ctx)], cwd=release)
            for pin in project.pins:
                names = [n for n in series if pin_of[n] == pin.name]
                args = [str(Path(tmp) / n if n == EDIT_PATCH else patches / n) for n in names]
                sh(["git", "-C", str(ctx / pin.name), "apply", *args])
        assert before == {t: (release / t).read_bytes() for t in touched}, "a hard-linked release file changed"
        assert all((ctx / t).read_bytes() != before[t] for t in touched), "a patched file is unchanged"
        print(
            f"git apply: the {len(series)} patches, one call per tree, {EDIT_PATCH} edited, twice on a cp -al copy: ok"
        )
    print(dockerfile("imgbuild-runtime:amd64-x", paths[:2], "/usr/local/lib/python3.12/dist-packages"))
    err = "+ docker image inspect a\nimgbuild: x\n+ docker buildx build --load -\n+ git status\n"
    assert echo_counts(err) == (2, 1), echo_counts(err)
    assert {k: len(v) for k, v in echo_kinds(err).items()} == {"reads": 1, "writes": 1}, echo_kinds(err)
    assert api_kinds(["GET /version", "HEAD /_ping", "POST /images/x/tag"])["writes"] == ["POST /images/x/tag"]
    assert module_name("vllm/a/__init__.py") == "vllm.a"
    calls: list[str] = []
    cs = [Contender(x, lambda x=x: calls.append(x), limit=1 if x == "c" else None) for x in "abc"]
    interleave_all(cs, 3, warm=False)
    assert calls == ["a", "b", "c", "b", "a", "a", "b"], calls
    calls.clear()
    interleave_all(cs[:2], 2, warm=True)
    assert calls == ["a", "b", "a", "b", "b", "a"], calls
    print("check: ok")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", nargs="+", default=["edit", "noop", "smoke", "first"])
    ap.add_argument("--rounds", type=int, default=5, help="edit and noop")
    ap.add_argument("--smoke-rounds", type=int, default=3)
    ap.add_argument("--smoke-target", type=float, default=1.15, help="NEW smoke / bare at most (issue 34; 1.3 before)")
    ap.add_argument(
        "--no-prune",
        dest="prune",
        action="store_false",
        help="first: no `buildx prune -af` before each run (a shared daemon); a new base id each run",
    )
    ap.add_argument("--first-rounds", type=int, default=3)
    ap.add_argument("--old-first-rounds", type=int, default=1, help="OLD's first builds (~3 min, 9 GB each); 0: none")
    ap.add_argument("--new-src", type=Path, default=ROOT / "src")
    ap.add_argument("--old-src", type=Path, default=Path("/work/old/src"))
    ap.add_argument("--old-rev", default=OLD_REV, help="the commit OLD's project is cloned at (its src: --old-src)")
    ap.add_argument("--proxy-rounds", type=int, default=3, help="noop: untimed runs counted at the engine socket")
    ap.add_argument("--no-old", action="store_true", help="leave OLD out of edit and noop (its OCI layout needs ~9 GB)")
    ap.add_argument("--work-parent", default=None, help="where the work directory goes (default: $TMPDIR)")
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    ap.add_argument("--check", action="store_true", help="test the pure parts; no docker")
    args = ap.parse_args()
    if args.check:
        return check()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    start_load = load()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"start: {start_load}", flush=True)
    facts = machine_facts(args)  # at the start: the branch may move during the run
    bench = Bench(args)
    rows: list[Row] = []
    failed: list[str] = []
    try:
        bench.setup()
        bench.runtime_base()
        print("\n".join(bench.facts), flush=True)
        for name in args.pairs:
            t0 = time.monotonic()
            try:
                rows.append(getattr(bench, f"pair_{name}")())
            except SystemExit as exc:  # one pair's failure is reported; the others still run
                failed.append(f"{name}: FAILED after {time.monotonic() - t0:.0f} s: {exc}")
                print(failed[-1], flush=True)
                continue
            print(f"  {name}: done in {time.monotonic() - t0:.0f} s ({load()})", flush=True)
            print("\n".join(table(rows[-1:])[2:]), flush=True)
    finally:
        bench.cleanup()
    report = [
        f"# bench_real_size.py: issue 21's pairs at real size ({started})",
        f"command: {command}",
        *facts,
        f"start: {start_load}",
        *bench.facts,
        "",
        *table(rows),
        "",
        "ratio: median / the reference's median (edit, first: HAND; smoke: bare docker run; noop: OLD)",
    ]
    for row in rows:
        report += [f"{row.pair}: {n}" for n in row.notes]
        report += [f"{row.pair}: {c.label}: runs {', '.join(f'{t:.2f}' for t in c.times)}" for c in row.cs]
        report += [
            f"{row.pair}: {c.label}: {c.failures} attempt(s) failed with {TRANSIENT!r} and were run again (not timed)"
            for c in row.cs
            if c.failures
        ]
    report += failed
    report.append(f"end: {load()}")
    text = "\n".join(report) + "\n"
    print("\n" + text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
