"""The command line as users meet it: help, usage errors, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imgbuild(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imgbuild", *args], capture_output=True, text=True, check=False)


def test_help_lists_every_command() -> None:
    out = imgbuild("--help")
    assert out.returncode == 0
    for name in ("quickstart", "plan", "patches", "build", "smoke", "inspect", "skeleton", "lock", "bake", "publish"):
        assert name in out.stdout


def test_usage_error_is_exit_2_without_traceback() -> None:
    out = imgbuild("plan", "--bogus")
    assert out.returncode == 2
    assert "No such option: --bogus" in out.stderr and "Traceback" not in out.stderr


def test_not_a_project_is_a_config_error(tmp_path: Path) -> None:
    out = imgbuild("-C", str(tmp_path), "plan")
    assert out.returncode == 3
    assert f"{tmp_path} is not an imgbuild project" in out.stderr and "hint:" in out.stderr


def test_json_error_on_stdout(tmp_path: Path) -> None:
    out = imgbuild("-C", str(tmp_path), "patches", "list", "--json")
    import json

    assert json.loads(out.stdout)["error"]["exit_code"] == 3
