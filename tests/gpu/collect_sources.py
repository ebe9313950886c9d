"""Write the engram.py files the GPU tier and its benchmark load, for a machine
without the vLLM release (the GPU machine has no network and no imgbuild cache):

    python3 tests/gpu/collect_sources.py OUT [--before-rev REV]

OUT/patched/engram.py is the stack's (``imgbuild patches apply``),
OUT/release/engram.py the pinned release's (the engram-mem variant reverts the
Engram group), and with ``--before-rev`` OUT/before/engram.py is the stack as
committed at REV (for the benchmark's side-by-side with an earlier patch).
Point ``IMGBUILD_GPU_SOURCES`` at OUT.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENGRAM = "vllm/models/deepseek_v41/common/engram.py"


def apply(project: Path, dest: Path, *args: str) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "imgbuild",
            "-C",
            str(project),
            "patches",
            "apply",
            "--into",
            str(dest),
            "--json",
            *args,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return dest / ENGRAM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--before-rev", help="a git revision of this repository whose patches/ to apply as 'before'")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        found = {
            "patched": apply(REPO, work / "patched"),
            "release": apply(REPO, work / "release", "--variant", "engram-mem"),
        }
        if args.before_rev:
            old = work / "old-project"
            old.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", args.before_rev, "patches", "images"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
            found["before"] = apply(old, work / "before")
        for name, path in found.items():
            (args.out / name).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, args.out / name / "engram.py")
            print(f"{args.out / name / 'engram.py'}")


if __name__ == "__main__":
    main()
