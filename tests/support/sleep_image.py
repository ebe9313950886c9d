"""A tiny image that only sleeps: a static `sleep` compiled here and imported FROM nothing, so a container of
it lives as long as a test wants and nothing has to be pulled."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from imgbuild.engine import Engine
from tests.support import needs

SLEEP_C = "#include <stdlib.h>\n#include <unistd.h>\nint main(int c, char **v) { sleep(atoi(v[1])); return 0; }\n"


def make_sleep_image(engine: Engine, tmp: Path, repository: str, tier: str) -> str:
    """Import the image as `repository:1`; its reference."""
    needs.tool("gcc", tier, "a static sleep binary for the test image, `gcc -static`")
    (tmp / "sleep.c").write_text(SLEEP_C)
    subprocess.run(["gcc", "-static", "-O1", "-o", str(tmp / "sleep"), str(tmp / "sleep.c")], check=True)
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(tmp / "sleep", arcname="sleep")
    engine.client.api.import_image_from_data(data.getvalue(), repository=repository, tag="1")
    return f"{repository}:1"
