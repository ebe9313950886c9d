"""What the cache mirror (upstream/mirror.py) asks of git: its checks (a ref's target, `git fsck
--connectivity-only`) and its one stream, `git fast-import`, which writes a wheel's files as one
commit. Through the process funnel like every git command (upstream/git.py)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from imgbuild import proc
from imgbuild.upstream.git import GitError, GitRepo, run_git


def ref_target(path: Path, ref: str) -> str:
    """The object `ref` points at in the repository at `path` ('' when there is no such ref).
    GitError (its first stderr line) when the refs cannot be read: a broken ref is not a missing one."""
    done = run_git(["for-each-ref", "--format=%(objectname)", ref], cwd=path)
    err = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0 or err:
        raise GitError((err or f"git for-each-ref exited {done.returncode}").splitlines()[0])
    return done.stdout.decode().strip()


def check_connected(path: Path, commit: str) -> None:
    """Every object of `commit` is there and readable (`git fsck --connectivity-only`); GitError naming the first
    problem otherwise."""
    done = run_git(["fsck", "--connectivity-only", "--no-dangling", "--no-progress", commit], cwd=path)
    lines = done.stderr.decode(errors="replace").splitlines()
    bad = [ln for ln in lines if ln.startswith(("error", "fatal", "missing", "broken"))]
    if done.returncode != 0 or bad:
        raise GitError(bad[0] if bad else f"git fsck exited {done.returncode}")


@contextlib.contextmanager
def fast_import(repo: GitRepo, *options: str, config: Mapping[str, str] | None = None) -> Iterator[IO[bytes]]:
    """A `git fast-import` into `repo`: write its commands to the stream yielded. GitError (with the end of
    fast-import's stderr) when it fails; a write it refused early (a broken pipe) is reported that way too."""
    args = [a for key, value in (config or {}).items() for a in ("-c", f"{key}={value}")]
    with tempfile.TemporaryFile() as errors:
        try:
            child = proc.popen(
                ["git", *args, "fast-import", *options],
                cwd=repo.path,
                stdin=proc.PIPE,
                stdout=proc.DEVNULL,
                stderr=errors,
            )
        except proc.ToolNotFound as exc:
            raise GitError("git is not installed (not found on PATH)") from exc
        assert child.stdin is not None
        try:
            yield child.stdin
        except BrokenPipeError:
            pass  # fast-import stopped early; its exit status and stderr say why
        except BaseException:
            child.kill()
            child.wait()
            raise
        finally:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()
        returncode = child.wait()
        errors.seek(0)
        stderr = errors.read()
    if returncode != 0:
        raise GitError(f"git fast-import failed: {stderr.decode(errors='replace')[-400:]}")
