"""Pure parts of smoke: import targets from a release tree, the probe's protocol, the integrity comparisons."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from imgbuild.engine import RunResult
from imgbuild.plan import labels as lbl
from imgbuild.smoke import checks as smoke
from imgbuild.smoke import launchcheck, probe
from imgbuild.smoke.importcheck import (
    candidate,
    imported_names,
    importers,
    kept_release_importers,
    module_name,
    modules_to_import,
    needles,
    release_importers,
)
from imgbuild.upstream.git import CommitTree, GitRepo
from tests.support.synth import Upstream

TREE = {
    "vllm/__init__.py": b"",
    "vllm/attention.py": b"import os\n",
    "vllm/models/__init__.py": b"",
    "vllm/models/engram.py": b"from vllm import attention\n",
    "vllm/models/user_abs.py": b"import vllm.models.engram as e\n",
    "vllm/models/user_rel.py": b"from . import engram\n",
    "vllm/models/user_from.py": b"from .engram import lookup\n",
    "vllm/models/deep/user_up.py": b"from ..engram import lookup\n",
    "vllm/models/deep/__init__.py": b"",
    "vllm/models/not_user.py": b"engram = 1\nimport vllm.models\n",
    "vllm/models/broken.py": b"def f(:\n  from .engram import x\n",
    "vllm/models/dynamic.py": b"import importlib\nimportlib.import_module('vllm.models.engram')\n",
    "vllm/other.py": b"from vllm.models.engram import *\n",
}


def test_module_names() -> None:
    assert module_name("vllm/models/engram.py") == "vllm.models.engram"
    assert module_name("vllm/models/__init__.py") == "vllm.models"
    assert module_name("vllm/data.json") is None
    assert module_name("vllm/my-file.py") is None


def test_relative_imports_resolve_against_the_package() -> None:
    assert imported_names(b"from . import engram\n", "vllm/models/user.py") == {"vllm.models", "vllm.models.engram"}
    assert imported_names(b"from .. import x\n", "vllm/models/__init__.py") == {"vllm", "vllm.x"}
    assert "vllm.models.engram" in imported_names(b"from ..engram import y\n", "vllm/models/deep/u.py")
    assert imported_names(b"from .... import x\n", "vllm/a.py") == set()  # climbs out of the tree


def test_importers_are_found_statically_and_only_direct_ones() -> None:
    found = importers(TREE, ["vllm.models.engram"])
    assert found == [
        "vllm.models.deep.user_up",
        "vllm.models.user_abs",
        "vllm.models.user_from",
        "vllm.models.user_rel",
        "vllm.other",
    ]
    # attention is imported by engram (a target, so not listed) only
    assert importers(TREE, ["vllm.attention", "vllm.models.engram"])[0] == "vllm.models.deep.user_up"


def test_modules_to_import_puts_the_planned_files_first() -> None:
    mods = modules_to_import(["vllm/models/engram.py", "vllm/attention.py"], ["vllm.other", "vllm.attention"])
    assert mods == ["vllm.models.engram", "vllm.attention", "vllm.other"]


def test_release_importers_read_a_real_git_tree(tmp_path: Path) -> None:
    up = Upstream(tmp_path / "up")
    up.release("v1.0.0", {k: v.decode() for k, v in TREE.items()})
    repo = GitRepo(up.path)
    commit = repo.resolve_commit("v1.0.0")
    assert commit is not None
    tree = CommitTree(repo, commit)
    assert release_importers(tree, ["vllm/models/engram.py"], "vllm") == importers(TREE, ["vllm.models.engram"])
    assert release_importers(tree, ["vllm/none_such.py"], "vllm") == []  # nothing contains the word


def test_a_releases_importers_are_kept_by_commit_and_files(tmp_path: Path) -> None:
    up = Upstream(tmp_path / "up")
    up.release("v1.0.0", {k: v.decode() for k, v in TREE.items()})
    up.release(
        "v1.1.0", {**{k: v.decode() for k, v in TREE.items()}, "vllm/late.py": "from vllm.models import engram\n"}
    )
    repo, cache = GitRepo(up.path), tmp_path / "cache"
    one, two = (CommitTree(repo, repo.resolve_commit(tag) or "") for tag in ("v1.0.0", "v1.1.0"))
    found = kept_release_importers(one, ["vllm/models/engram.py"], "vllm", cache)
    assert found == importers(TREE, ["vllm.models.engram"])
    (kept,) = (cache / "importers").iterdir()
    kept.write_text('["vllm.as.kept"]')  # what is kept is what is returned: the tree is not read again
    assert kept_release_importers(one, ["vllm/models/engram.py"], "vllm", cache) == ["vllm.as.kept"]
    assert "vllm.late" in kept_release_importers(two, ["vllm/models/engram.py"], "vllm", cache)  # another commit
    kept.write_text("{not json")  # a damaged entry is found again, and written again
    assert kept_release_importers(one, ["vllm/models/engram.py"], "vllm", cache) == found
    assert json.loads(kept.read_text()) == found


def package(tmp_path: Path, modules: dict[str, str]) -> Path:
    """`tmp_path/pk`, a package of `modules` (name -> source), importable from `tmp_path`."""
    pkg = tmp_path / "pk"
    pkg.mkdir()
    for name, source in {"__init__": "", **modules}.items():
        (pkg / f"{name}.py").write_text(source)
    return pkg


def run_probe(job: probe.Job, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The probe's program as `job` has it, run here by this python."""
    return subprocess.run([sys.executable, *job.argv()[1:]], capture_output=True, text=True, cwd=cwd, check=False)


def test_probe_runs_here_and_its_lines_parse(tmp_path: Path) -> None:
    pkg = package(
        tmp_path,
        {
            "good": "x = 1\n",
            "bad": "import os\n\nfrom os import no_such_name\n",
            "undefined": "y = 2\nz = not_defined_anywhere\n",
            "syntax": "def f(:\n",
        },
    )
    good, syntax = str(pkg / "good.py"), str(pkg / "syntax.py")
    job = probe.Job(
        (good, syntax, "/no/such.py"),
        ("echo out; echo err >&2", "exit 3", "sleep 5"),
        1,  # seconds per command: "sleep 5" times out after one
        ("pk.good", "pk.bad", "pk.undefined", "pk.syntax"),
        "imgbuild",  # a console script installed here: its `--version` runs in the probe's process
    )
    argv = [sys.executable, *job.argv()[1:]]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, check=False, timeout=60)
    res = probe.parse(proc.stdout + "imgbuild-probe ('garbage'\nnoise\n")
    assert res.ran and res.python == sys.version.split()[0]
    assert res.hashes[good] is not None and res.hashes["/no/such.py"] is None
    assert res.compiles[good] == (True, "") and not res.compiles[syntax][0]
    assert res.commands["echo out; echo err >&2"].stdout == "out\n"
    assert res.commands["exit 3"].exit_code == 3
    assert res.commands["sleep 5"].timed_out
    assert res.imports["pk.good"].ok
    bad = res.imports["pk.bad"]
    assert bad.error.startswith("ImportError: cannot import name 'no_such_name'") and bad.where.endswith("bad.py:3")
    undefined = res.imports["pk.undefined"]
    assert undefined.error.startswith("NameError") and undefined.where.endswith("undefined.py:2")
    assert res.imports["pk.syntax"].where.endswith("syntax.py:1")
    assert res.cli is not None and res.cli.exit_code == 0 and not res.importing, res.cli
    assert res.cli.stdout.strip(), "imgbuild --version printed its version"


def test_a_console_script_that_is_not_there_fails_naming_it(tmp_path: Path) -> None:
    job = probe.Job((), (), 10, (), "no-such-cli")
    proc = run_probe(job, tmp_path)
    res = probe.parse(proc.stdout)
    assert res.cli is not None and res.cli.exit_code == 1
    assert res.cli.stderr == "LookupError: no-such-cli is not on PATH"


def test_a_python3_c_command_runs_through_the_shell_as_written(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\necho another python\n")
    (bin_dir / "python3").chmod(0o755)
    job = probe.Job((), ('python3 -c "print(1)"',), 10)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, *job.argv()[1:]], capture_output=True, text=True, env=env, check=False)
    assert probe.parse(proc.stdout).commands['python3 -c "print(1)"'].stdout == "another python\n"


def test_probe_output_cut_off_mid_import_names_the_module() -> None:
    out = "imgbuild-probe ('python', '3.12.1')\nimgbuild-probe ('import-start', 'vllm.x')\nSegmentation fault\n"
    res = probe.parse(out)
    assert res.ran and res.importing == {"vllm.x"} and res.imports == {}


def test_the_importers_are_shared_with_forked_workers_that_start_from_the_planned_modules(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    record = (
        "import os, sys\n"
        f"with open({str(seen)!r}, 'a') as f:\n"
        "    f.write(f'{__name__} {os.getpid()} {\"pk.planned\" in sys.modules}\\n')\n"
    )
    names = [f"pk.m{i}" for i in range(6)]
    # pk.bad: a long error, cut to one line
    package(
        tmp_path, {"planned": "", **{n[3:]: record for n in names}, "bad": "raise RuntimeError('bad ' + 'x' * 5000)\n"}
    )
    job = probe.Job((), (), 10, ("pk.planned", *names, "pk.bad"), "", split=1)
    proc = run_probe(job, tmp_path)
    res = probe.parse(proc.stdout)
    assert proc.returncode == 0 and not res.importing and not res.lost, proc.stderr
    assert all(res.imports[n].ok for n in ("pk.planned", *names))
    assert not res.imports["pk.bad"].ok and res.imports["pk.bad"].error.startswith("RuntimeError: bad xxx")
    rows = [line.split() for line in seen.read_text().splitlines()]
    assert sorted(r[0] for r in rows) == names and all(r[2] == "True" for r in rows)  # each once, planned loaded
    pids = {r[1] for r in rows}
    assert len(pids) == min(job.workers, len(os.sched_getaffinity(0))), pids  # this process and its workers


def test_a_worker_that_dies_fails_its_modules_and_the_probe_goes_on(tmp_path: Path) -> None:
    package(
        tmp_path, {"a": "", "die": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "b": "", "after": ""}
    )
    # two processes: pk.a and pk.b in the probe's own, pk.die then pk.after in the worker
    job = probe.Job((), (), 10, ("pk.a", "pk.die", "pk.b", "pk.after"), "", split=0, workers=2)
    proc = run_probe(job, tmp_path)
    res = probe.parse(proc.stdout)
    checks = smoke._import_checks(job, [], False, res, RunResult(proc.returncode, proc.stdout, proc.stderr))
    details = {c.name: (c.status, c.detail) for c in checks}
    if len(os.sched_getaffinity(0)) >= 2:
        assert proc.returncode == 0 and res.imports["pk.a"].ok and res.imports["pk.b"].ok
        assert details["import pk.die"] == ("fail", "a probe worker died (signal 9) while importing it")
        assert details["import pk.after"] == ("fail", "not run: its probe worker died (signal 9)")
    else:  # one CPU: no worker, the probe itself dies there
        assert proc.returncode == -9 and details["import pk.die"][0] == "fail"


BASE = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
OWN = ("sha256:" + "c" * 64,)


def test_layers_must_be_the_base_then_imgbuilds() -> None:
    assert smoke.layer_problems([*BASE, *OWN], BASE, 1) == []
    extra = smoke.layer_problems([*BASE, *OWN, "sha256:" + "d" * 64], BASE, 1)
    assert extra == [
        "layer 3 (dddddddddddd) is neither the base's nor imgbuild's "
        "(added after the build: a `docker commit` or a later RUN/COPY?)"
    ]
    swapped = smoke.layer_problems([BASE[0], "sha256:" + "e" * 64, *OWN], BASE, 1)
    assert swapped == ["layer 1: expected base layer 1 bbbbbbbbbbbb, image has eeeeeeeeeeee"]
    assert smoke.layer_problems([*BASE], BASE, 1) == ["layer 2 missing: expected imgbuild layer 0 ?"]
    assert smoke.layer_problems([*BASE, "sha256:" + "f" * 64], BASE, 1) == []  # imgbuild's: counted
    many = smoke.layer_problems(["sha256:" + "0" * 64] * 6, BASE, 1)
    assert len(many) == smoke.NOTED + 1 and many[-1] == "and 2 more"


def test_env_is_the_base_env_with_the_variant_over_it() -> None:
    expected = {**smoke.env_dict(["PATH=/bin", "A=1"]), "A": "2", "DSV41_ENGRAM_DISK": "1"}
    assert expected == {"PATH": "/bin", "A": "2", "DSV41_ENGRAM_DISK": "1"}
    assert smoke.exact("ENV", smoke.env_dict(["PATH=/bin", "A=2", "DSV41_ENGRAM_DISK=1"]), expected) == []
    problems = smoke.exact("ENV", smoke.env_dict(["PATH=/bin", "A=3", "EXTRA=x"]), expected)
    assert problems == [
        "ENV A: image has '3', plan says '2'",
        "ENV DSV41_ENGRAM_DISK: missing, plan says '1'",
        "ENV EXTRA='x': not in the plan (nor the base)",
    ]


def test_labels_exact_and_against_the_config_label() -> None:
    plan = {"imgbuild.variant": "latest", "org.opencontainers.image.description": "d"}
    assert smoke.exact("label", {**plan}, plan) == []
    assert smoke.exact("label", {**plan, "x": "1"}, plan) == ["label x='1': not in the plan (nor the base)"]
    changed = smoke.exact("label", {**plan, "imgbuild.variant": "other"}, plan)
    assert changed == ["label imgbuild.variant: image has 'other', plan says 'latest'"]

    config = lbl.parse_config(lbl.config_label(plan, (("K", "v"),)))
    assert config.env == {"K": "v"}
    base = {"vendor": "x"}
    image = {**plan, **base, lbl.CONFIG: "...", lbl.INPUTS: "..."}
    assert smoke.config_label_problems(image, config, base) == []
    bad = {**image, "org.opencontainers.image.description": "edited", "vendor": "y", "new": "1"}
    assert smoke.config_label_problems(bad, config, base) == [
        "label org.opencontainers.image.description: changed after the build (imgbuild wrote sha256 "
        f"{config.labels['org.opencontainers.image.description']}..., image has 'edited')",
        "label new='1': set by neither imgbuild nor the base",
        "label vendor: image has 'y', the base 'x'",
    ]
    assert smoke.config_label_problems(bad, config, None)[1:] == []  # without the base: imgbuild's keys only


def test_needles_name_the_package_from_outside_and_the_module_inside() -> None:
    leaf, words = needles("vllm/models/deepseek_v41/common/engram.py")
    assert leaf == "engram"
    assert words == {
        "vllm/models/deepseek_v41/common": "engram",
        "vllm/models/deepseek_v41": "common",
        "vllm/models": "deepseek_v41.common",
        "vllm": "models.deepseek_v41.common",
    }
    target = "vllm/models/deepseek_v41/common/engram.py"
    assert candidate("vllm/models/deepseek_v41/common/x.py", b"from . import engram", target)
    assert candidate("vllm/models/deepseek_v41/nvidia/x.py", b"from ..common import engram", target)
    assert candidate("vllm/v1/x.py", b"from vllm.models.deepseek_v41.common.engram import y", target)
    assert not candidate("vllm/v1/x.py", b"from .common import engram", target)  # another `common`
    assert not candidate("vllm/v1/x.py", b"import vllm.models.deepseek_v41.common", target)  # no leaf


def test_import_failures_of_the_release_count_only_when_a_planned_file_is_involved() -> None:
    paths = ("/site/vllm/models/engram.py",)
    job = probe.Job(paths, (), 10, ("vllm.models.engram", "vllm.rocm", "vllm.user", "vllm.user2"), "")
    out = [
        ("python", "3.12.1"),
        ("import", "vllm.models.engram", True, "", "", []),
        ("import", "vllm.rocm", False, "ModuleNotFoundError: No module named 'aiter'", "/site/vllm/rocm.py:3", []),
        (
            "import",
            "vllm.user",
            False,
            "NameError: name 'x' is not defined",
            "/site/vllm/models/engram.py:9",
            list(paths),
        ),
        ("import", "vllm.user2", False, "ImportError: cannot import name 'gone' from 'vllm.models.engram'", "u:1", []),
    ]
    result = probe.parse("".join(f"imgbuild-probe {rec!r}\n" for rec in out))
    checks = smoke._import_checks(job, ["vllm.models.engram"], False, result, RunResult(0, "", ""))
    status = {c.name: c.status for c in checks}
    assert status == {
        "import vllm.models.engram": "pass",
        "import vllm.rocm": "skip",
        "import vllm.user": "fail",
        "import vllm.user2": "fail",
    }
    assert "raised at /site/vllm/models/engram.py:9" in checks[2].detail


def test_a_probe_that_died_mid_import_fails_that_module_and_the_rest() -> None:
    job = probe.Job((), (), 10, ("vllm.a", "vllm.b", "vllm.c"), "vllm")
    text = "imgbuild-probe ('python', '3.12.1')\nimgbuild-probe ('import', 'vllm.a', True, '', '', [])\n"
    result = probe.parse(text + "imgbuild-probe ('import-start', 'vllm.b')\n")
    checks = smoke._import_checks(job, ["vllm.a"], False, result, RunResult(139, "", "Segmentation fault"))
    assert [(c.name, c.status) for c in checks] == [
        ("import vllm.a", "pass"),
        ("import vllm.b", "fail"),
        ("import vllm.c", "fail"),
        ("vllm --version", "fail"),
    ]
    assert checks[1].detail == "the probe stopped (exit 139): Segmentation fault while importing it"
    skipped = smoke._import_checks(job, ["vllm.a"], True, result, RunResult(0, "", ""))
    assert [c.status for c in skipped] == ["skip"] and "no torch" in skipped[0].detail


def test_vllm_version_without_a_gpu_is_skipped_naming_why_and_other_failures_fail() -> None:
    job = probe.Job((), (), 10, ("vllm.a",), "vllm")
    head = "imgbuild-probe ('python', '3.12.1')\nimgbuild-probe ('import', 'vllm.a', True, '', '', [])\n"
    no_gpu = "RuntimeError: Failed to infer device type, please set the environment variable"
    for stderr, status in ((no_gpu, "skip"), ("ModuleNotFoundError: No module named 'uvicorn'", "fail")):
        out = head + f"imgbuild-probe {('cli', 'vllm', 1, False, '', stderr)!r}\n"
        checks = smoke._import_checks(job, ["vllm.a"], False, probe.parse(out), RunResult(0, "", ""))
        assert (checks[-1].name, checks[-1].status) == ("vllm --version", status)
        assert stderr[:40] in checks[-1].detail


def test_the_launcher_checks_and_the_probe_share_one_shell(tmp_path: Path) -> None:
    job = probe.Job((), ("echo hi",), 10)
    argv = job.under_bash(launchcheck.SCRIPT)
    assert argv[:2] == ["bash", "-c"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, check=False, timeout=60)
    launched = launchcheck.parse(proc.stdout)
    assert launched.ran and launched.kill, proc.stdout  # sparkrun's sentinel, then the standalone kill
    res = probe.parse(proc.stdout)
    assert res.ran and res.commands["echo hi"].stdout == "hi\n", proc.stderr


@pytest.mark.parametrize("mode", list(py_compile.PycInvalidationMode))
def test_the_probe_asks_the_loader_which_code_import_would_run(
    tmp_path: Path, mode: py_compile.PycInvalidationMode
) -> None:
    """A .pyc compiled from the release beside a patched file: only an unchecked-hash one makes import run the
    release (Python never checks it against the file); the probe says so, and passes once the .pyc is the file's."""
    pkg = package(tmp_path, {"patched": "x = 'release'\n"})
    path = pkg / "patched.py"
    py_compile.compile(str(path), invalidation_mode=mode, doraise=True)  # the base's bytecode, of the release
    path.write_text("x = 'patched!'\n")  # the overlay (a size change: a timestamp .pyc is stale by its header)
    job = probe.Job((str(path),), (), 10)
    ok, detail = probe.parse(run_probe(job, tmp_path).stdout).loads[str(path)]
    unchecked = mode is py_compile.PycInvalidationMode.UNCHECKED_HASH
    assert ok is not unchecked, detail
    if unchecked:
        assert detail.startswith("the interpreter would run ") and "(unchecked-hash), not this file's code" in detail
    py_compile.compile(str(path), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH, doraise=True)
    ok, detail = probe.parse(run_probe(job, tmp_path).stdout).loads[str(path)]
    assert ok and detail.endswith("(checked-hash)"), detail
    assert detail == f"from {Path(importlib.util.cache_from_source(str(path))).relative_to(pkg)} (checked-hash)"
