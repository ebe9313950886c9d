"""The process funnel (imgbuild/proc.py): echo under IMGBUILD_ECHO=1, typed errors for a missing tool or a timeout.

Real processes throughout: git, pip, sleep, and executables that are not there."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import docker
import pytest

from imgbuild import proc
from imgbuild.engine import Engine
from imgbuild.errors import DockerError, RegistryError
from imgbuild.publish import signing
from imgbuild.registry import tools
from imgbuild.upstream import pip
from imgbuild.upstream.git import GitError, GitRepo
from tests.support.synth import git


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    git(tmp_path, "init", "-q", "repo")
    return GitRepo(tmp_path / "repo")


def echoed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("+ ")]


def test_a_git_command_is_echoed_as_one_shell_line(
    repo: GitRepo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("IMGBUILD_ECHO", raising=False)
    repo.run("config", "imgbuild.note", "two words")
    assert echoed(capsys) == []  # off by default
    monkeypatch.setenv("IMGBUILD_ECHO", "1")
    assert repo.run("config", "--get", "imgbuild.note") == "two words\n"
    assert echoed(capsys) == ["+ git config --get imgbuild.note"]
    repo.run("config", "imgbuild.note", "it's here")
    line = echoed(capsys)
    assert line == ["+ git config imgbuild.note 'it'\"'\"'s here'"]
    assert shlex.split(line[0][2:]) == ["git", "config", "imgbuild.note", "it's here"]  # pastes back into a shell


def test_pip_is_echoed_through_its_funnel(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("IMGBUILD_ECHO", "1")
    done = pip.run(["--version"])
    assert done.returncode == 0 and done.stdout.startswith("pip "), done.stderr
    assert echoed(capsys) == [f"+ {shlex.quote(sys.executable)} -m pip --version"]


def test_a_missing_executable_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-tool")
    with pytest.raises(proc.ToolNotFound, match="no-such-tool is not installed") as caught:
        proc.run([missing, "--version"])
    assert caught.value.tool == missing
    with pytest.raises(FileNotFoundError) as not_tool:  # a missing directory to run in is not a missing tool
        proc.run(["git", "--version"], cwd=tmp_path / "gone")
    assert not isinstance(not_tool.value, proc.ToolNotFound) and "gone" in str(not_tool.value)


def test_a_timeout_is_a_typed_error() -> None:
    with pytest.raises(proc.ToolTimeout, match=r"sleep 5 did not finish within 0.2 s") as caught:
        proc.run(["sleep", "5"], timeout=0.2)
    assert caught.value.tool == "sleep"


def test_each_funnel_names_its_missing_tool(repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMGBUILD_DOCKER", str(tmp_path / "no-docker"))  # the one door: builds and the registry
    with pytest.raises(DockerError, match=r"docker CLI .*no-docker.* not found"):
        client = docker.DockerClient(base_url=f"unix://{tmp_path / 'no.sock'}", version="1.45")
        Engine(client).build(b"", tags=["x:1"], platforms=[], epoch=0, builder="b")
    monkeypatch.setenv("IMGBUILD_COSIGN", str(tmp_path / "no-cosign"))
    with pytest.raises(RegistryError, match=r"cosign \(.*no-cosign\) is not installed"):
        signing.sign("127.0.0.1:5000/x@sha256:" + "0" * 64, tmp_path / "cosign.key")
    with pytest.raises(RegistryError, match=r"127.0.0.1:5000/x:t: the docker CLI \(.*no-docker\) is not installed"):
        tools.push("x:t", "127.0.0.1:5000/x:t")
    with pytest.raises(RegistryError, match=r"cannot look up 127.0.0.1:5000/x:t: the docker CLI"):
        tools.inspect("127.0.0.1:5000/x:t")
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: no git
    with pytest.raises(GitError, match="git is not installed"):
        repo.run("status")
