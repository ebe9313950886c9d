"""The command line as users meet it: help, usage errors, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.jsonschema_check import load_json
from tests.support.runner import imgbuild

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_command() -> None:
    out = imgbuild(None, "--help")
    assert out.returncode == 0
    for name in ("plan", "patches", "build", "smoke", "skeleton", "lock", "bake", "publish"):
        assert name in out.stdout
    assert "inspect" not in out.stdout  # `smoke IMAGE --static` does what it did


def test_usage_error_is_exit_2_without_traceback() -> None:
    out = imgbuild(None, "plan", "--bogus")
    assert out.returncode == 2
    assert "No such option: --bogus" in out.stderr and "Traceback" not in out.stderr
    # click's own usage errors say it as every other error does: `error:` and `hint:` lines, no box (issue 44)
    lines = out.stderr.splitlines()
    assert lines[0] == "error: No such option: --bogus" and lines[1].startswith("hint: `"), out.stderr
    assert "plan --help` lists what it takes" in lines[1] and "╭" not in out.stderr, out.stderr
    missing = imgbuild(None, "recipe")
    assert missing.returncode == 2 and missing.stderr.startswith("error: Missing argument 'VARIANT'."), missing.stderr


def test_no_colour_codes_in_a_ci_log_unless_asked_for() -> None:
    """Under GitHub Actions (GITHUB_ACTIONS=true) stderr is a pipe: no escape codes (typer alone would force
    them on there); FORCE_COLOR still turns colour on, and NO_COLOR wins over it."""
    plain = imgbuild(None, "plan", "--bogus", GITHUB_ACTIONS="true", FORCE_COLOR="", PY_COLORS="", NO_COLOR="")
    assert "No such option: --bogus" in plain.stderr and "\x1b[" not in plain.stderr
    help_text = imgbuild(None, "--help", GITHUB_ACTIONS="true", FORCE_COLOR="", PY_COLORS="")
    assert help_text.returncode == 0 and "\x1b[" not in help_text.stdout


def test_not_a_project_is_a_config_error(tmp_path: Path) -> None:
    out = imgbuild(None, "-C", str(tmp_path), "plan")
    assert out.returncode == 3
    assert f"{tmp_path} is not an imgbuild project" in out.stderr and "hint:" in out.stderr


def test_json_error_on_stdout(tmp_path: Path) -> None:
    out = imgbuild(None, "-C", str(tmp_path), "patches", "list", "--json")

    assert load_json(out.stdout)["error"]["exit_code"] == 3


IMPORTED = (
    "import runpy, sys\n"
    "sys.argv = ['imgbuild', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('imgbuild', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
)


def imported_by(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", IMPORTED, *args], capture_output=True, text=True, check=False)
    return set(out.stderr.strip().splitlines()[-1].split())


def test_help_imports_only_the_commands() -> None:
    # The command modules import what they run inside the command (b4's pattern), so `--help`
    # loads no project, image, registry or deploy code.
    modules = imported_by("--help")
    assert "imgbuild.cli.app" in modules
    ours = {m.split(".")[1] for m in modules if m.startswith("imgbuild.") and m.count(".") >= 1}
    assert (
        not {
            "project",
            "engine",
            "plan",
            "smoke",
            "builder",
            "publish",
            "registry",
            "deploy",
            "workflows",
            "upstream",
            "config",
            "report",
        }
        & ours
    )
    assert not {"git", "pydantic", "docker", "requests", "rich"} & modules


def test_skeleton_help_names_the_skeletons_site_packages() -> None:
    from imgbuild.builder.skeleton import SITE_PACKAGES
    from imgbuild.cli import skeleton

    assert skeleton.SITE_PACKAGES == SITE_PACKAGES


def test_publish_and_patches_import_no_docker_sdk() -> None:
    for args in (("publish", "--help"), ("bake", "--help"), ("patches", "check", "--help")):
        modules = imported_by(*args)
        assert "imgbuild.cli." + args[0] in modules  # the command really loaded
        assert not {"docker", "imgbuild.builder.runner", "imgbuild.engine"} & modules, args


# Heavy modules `patches check` (no --onto) does not run: the rebase and queue machinery
# belong to other subcommands, the carry matrix to --onto.
NOT_FOR_CHECK = {
    "docker",
    "requests",
    "imgbuild.workflows.rebase",
    "imgbuild.workflows.queue",
    "imgbuild.workflows.matrix",
}


def test_patches_check_json_imports_only_what_it_runs(tmp_path: Path) -> None:
    from tests.support.synth import Upstream
    from tests.support.synth_images import engram_project, release

    upstream = Upstream(tmp_path / "upstream")
    release(upstream)
    root = engram_project(tmp_path / "p", upstream, "vllm-dsv41")
    out = subprocess.run(
        [sys.executable, "-c", IMPORTED, "-C", str(root), "patches", "check", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert '"ok": true' in out.stdout, out.stderr[-2000:]  # the check really ran, and passed
    modules = set(out.stderr.strip().splitlines()[-1].split())
    assert "imgbuild.workflows.checkstack" in modules
    assert not NOT_FOR_CHECK & modules


def test_plan_imports_no_engine_unless_asked_for_the_bases(tmp_path: Path) -> None:
    """`plan` is pure: the docker SDK (and the engine behind `--bases`) loads only for `--bases`."""
    from tests.support.synth import Upstream
    from tests.support.synth_images import engram_project, release

    upstream = Upstream(tmp_path / "upstream")
    release(upstream)
    root = engram_project(tmp_path / "p", upstream, "vllm-dsv41")
    out = subprocess.run(
        [sys.executable, "-c", IMPORTED, "-C", str(root), "plan", "--json"], capture_output=True, text=True, check=False
    )
    assert '"variants"' in out.stdout, out.stderr[-2000:]  # the plan really ran
    modules = set(out.stderr.strip().splitlines()[-1].split())
    assert "imgbuild.plan.layers" in modules
    assert not {"docker", "requests", "imgbuild.engine.client", "imgbuild.builder.packages"} & modules


def test_unknown_command_suggests_the_closest() -> None:
    out = imgbuild(None, "buil")
    assert out.returncode == 2
    assert "Did you mean 'build'?" in out.stderr


def test_short_names_disambiguate_only_shared_file_names() -> None:
    from imgbuild.report.tables import short_name, short_names

    paths = ["vllm/x/m.py", "vllm/y/m.py", "vllm/z.py"]
    assert short_names(paths) == {"vllm/x/m.py": "x/m.py", "vllm/y/m.py": "y/m.py", "vllm/z.py": "z.py"}
    assert [short_name(p, paths) for p in paths] == ["x/m.py", "y/m.py", "z.py"]


def test_exit_1_is_reached_only_through_check_failed() -> None:
    """Each exit code has one error class: nothing raises the base class or leaves with a bare exit 1."""
    import re

    src = ROOT / "src" / "imgbuild"
    bare = re.compile(r"raise ImgbuildError\(|typer\.Exit\((code=)?1\)|sys\.exit\(1\)")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted(src.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]  # fmt: skip
    assert found == []
    from imgbuild import errors

    classes = [
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, errors.ImgbuildError) and c is not errors.ImgbuildError
    ]
    codes = {c.exit_code: c.__name__ for c in classes}
    assert len(codes) == len(classes)  # one class per exit code
    assert codes[errors.ExitCode.FAILURE] == "CheckFailed" and codes[errors.ExitCode.USAGE] == "UsageError"


def test_the_entry_module_imports_nothing_before_its_try() -> None:
    """A Ctrl-C while `imgbuild.cli.main` itself loads had no handler yet and printed a traceback (issue 44: its
    `import json` at the top was the widest window): it now imports only `sys` (and `typing`, `__future__`) before
    `run`'s try, where the app and everything else load."""
    import subprocess
    import sys

    code = (
        "import sys; before = set(sys.modules); import imgbuild.cli.main; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert loaded <= {"imgbuild", "imgbuild.cli", "imgbuild.cli.main", "typing", "__future__"}, loaded
