"""Launcher checks (smoke/launchcheck.py): the verdicts sparkrun's probe would reach, from probe output."""

from __future__ import annotations

from imgbuild.smoke import launchcheck as lc

RAN = f"{lc.TOKEN}\nkill=/usr/bin/kill\n"
RAN_NO_KILL = f"{lc.TOKEN}\n"


def test_the_script_prints_a_computed_sentinel_not_the_literal_token() -> None:
    assert lc.TOKEN not in lc.SCRIPT and "$((21*2))" in lc.SCRIPT
    assert lc.ARGV[:2] == ("bash", "-c")  # the argv shape sparkrun appends to the image


def test_parse() -> None:
    assert lc.parse(RAN) == lc.Probe(True, "/usr/bin/kill")
    assert lc.parse(RAN_NO_KILL) == lc.Probe(True, None)
    # an entrypoint that echoes its argv back prints the script, never the evaluated sentinel
    assert lc.parse(f"error: unknown argument {lc.SCRIPT}\n") == lc.Probe(False, None)


def test_no_entrypoint_and_a_standalone_kill_pass() -> None:
    got = lc.results(None, lc.parse(RAN), None)
    assert [(n, s) for n, s, _ in got] == [("entrypoint", "pass"), ("kill", "pass")]
    assert "/usr/bin/kill" in got[1][2]


def test_a_passthrough_wrapper_is_kept() -> None:
    (name, status, detail), _ = lc.results(["/opt/nvidia/nvidia_entrypoint.sh"], lc.parse(RAN), None)
    assert (name, status) == ("entrypoint", "pass") and "kept" in detail


def test_a_consuming_entrypoint_fails_and_says_how_to_fix_it() -> None:
    got = lc.results(["vllm", "serve"], lc.parse("usage: vllm serve ..."), lc.parse(RAN))
    (_, status, detail), kill = got
    assert status == "fail" and "consumes" in detail and "ENTRYPOINT []" in detail
    assert kill[1] == "pass"  # read from the run with the ENTRYPOINT cleared


def test_only_the_builtin_kill_fails() -> None:
    _, (name, status, detail) = lc.results(None, lc.parse(RAN_NO_KILL), None)
    assert (name, status) == ("kill", "fail") and "kill -0" in detail and "procps" in detail


def test_no_bash_fails_both() -> None:
    got = lc.results(["/e.sh"], lc.Probe(False, None), lc.Probe(False, None))
    assert [s for _, s, _ in got] == ["fail", "fail"] and "bash" in got[0][2]
