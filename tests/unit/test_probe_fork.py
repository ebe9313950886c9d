"""Which smoke commands the probe runs in a fork of itself (probe.fork_code), and how the job says so."""

from __future__ import annotations

import ast

import pytest

from imgbuild.images import probe


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ('python3 -c "import vllm"', "import vllm"),
        ("python3 -c 'print(\"$HOME\")'", 'print("$HOME")'),  # single quotes: sh passes $ as written
        ('python3 -c "import a\nimport b"', "import a\nimport b"),
        ('python3 -c ""', ""),
        (
            "python3 -c \"import importlib.util as u; s = u.find_spec('vllm'); assert s\"",
            "import importlib.util as u; s = u.find_spec('vllm'); assert s",
        ),
    ],
)
def test_exactly_python3_c_forks(command: str, code: str) -> None:
    assert probe.fork_code(command) == code


@pytest.mark.parametrize(
    "command",
    [
        'python3 -c "print($HOME)"',  # sh would expand it
        'python3 -c "print(`date`)"',
        'python3 -c "print(\\"x\\")"',  # sh would unescape it
        'python3 -c "import vllm" 2>&1',
        'python3 -c "import vllm"; echo done',
        'python3 -c "a" "b"',
        ' python3 -c "import vllm"',
        'python3  -c "import vllm"',
        'python3 -X importtime -c "import vllm"',
        'python3.12 -c "import vllm"',
        "/usr/bin/python3 -c 'import vllm'",
        "python3 -c import",
        "python3 -c 'it''s'",
        "vllm --version",
    ],
)
def test_anything_else_goes_through_the_shell(command: str) -> None:
    assert probe.fork_code(command) is None


def test_the_job_names_the_code_to_fork_unless_told_not_to() -> None:
    commands = ('python3 -c "import vllm"', "echo hi")
    for fork, first in ((True, "import vllm"), (False, None)):
        argv = probe.Job(("/a.py",), commands, 5, ("m",), "v", fork=fork).argv()
        assert argv[:2] == ["python3", "-c"] and argv[2] == probe.PROBE
        assert ast.literal_eval(argv[3]) == (["/a.py"], [(commands[0], first), ("echo hi", None)], 5, ["m"], "v")
