"""The project as it stood on vLLM 0.33.0 (FlashInfer 0.7.2.post1), before the 0.34.0 carry: the release tier's
real bump from 0.33.0 to 0.34.0 starts there. Taken from this repository's own history (CHANGELOG.md names the
commit), so the series is the one users built, byte for byte."""

from __future__ import annotations

import subprocess
from pathlib import Path

LAST_0_33_0 = "cc08260"  # the last commit that built vLLM 0.33.0 (CHANGELOG.md, "vLLM 0.34.0")
REPO = Path(__file__).resolve().parents[2]


def checkout_0_33_0(dest: Path) -> Path:
    """`patches/` and `images/` of LAST_0_33_0 in `dest`, committed on `main` of a new git repository."""
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", LAST_0_33_0, "patches", "images"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise RuntimeError(
            f"the 0.33.0 project is commit {LAST_0_33_0} of this repository, which this clone lacks "
            f"({archive.stderr.decode(errors='replace').strip()}): the release tier needs a full clone "
            "(`git fetch --unshallow`)"
        )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    (dest / ".gitignore").write_text("/.imgbuild-work/\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "the project at vLLM 0.33.0"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=dest, check=True,
                       capture_output=True)  # fmt: skip
    return dest
