"""sparkrun's delegated mode for `builder: imgbuild`: the image is built on the head node, not here.

sparkrun (`transfer_mode="delegated"`) distributes from the head (`hosts[0]`) to the workers, so the builder must
leave the image in the head's engine. imgbuild runs there, over sparkrun's own SSH (`ssh_kwargs`, the helpers of
`sparkrun.orchestration`, as its eugr builder's `_build_image_remote` does), with the project at the recipe's
revision: a git URL is cloned or fetched on the head; a local directory is sent as a tar of its files (git's
tracked and untracked-but-not-ignored files when it is a work tree) into `$XDG_CACHE_HOME/imgbuild/
sparkrun-projects/` there. Only the project's files cross the control machine's link; the build, its bases, the
release and the image stay on the head (docs/launching.md says why this design and not a layer copy).

Imported only by the plugin (sparkrun's process; imgbuild never imports it). Checked: sparkrun 0.4.2 has no
"run this builder on that host" helper beyond `run_script_on_host` and `run_pipeline_to_remote`, which are used.
"""

from __future__ import annotations

import hashlib
import shlex
from typing import Any

from imgbuild import proc
from imgbuild.deploy import sparkrun_cli as cli

HEAD_DIR = '"${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild/sparkrun-projects"'
BUILD_TIMEOUT = 4 * 3600  # a first build on a head pulls the base (tens of GB) and the release


def head_key(project: str) -> str:
    return hashlib.sha256(project.encode()).hexdigest()[:16]


def fetch_script(url: str, revision: str | None, *, offline: bool = False) -> str:
    """On the head: a clone of `url` at `revision` (the remote's HEAD without one), printed as its path. Offline:
    the clone already there, checked out at `revision` (a commit or tag it has; without one, as it is), no fetch."""
    where = f"{HEAD_DIR}/{head_key(url)}"
    if offline:
        missing = shlex.quote(f"offline: no clone of {url} on this head")
        return (
            "set -e\n"
            f"d={where}\n"
            f'if [ ! -d "$d/.git" ]; then echo {missing} >&2; exit 11; fi\n'
            + (f'git -C "$d" checkout --quiet --detach {shlex.quote(revision)}\n' if revision else "")
            + 'echo "$d"\n'
        )
    return (
        "set -e\n"
        f"d={where}\n"
        f'if [ ! -d "$d/.git" ]; then mkdir -p "$(dirname "$d")"; git clone --quiet -- {shlex.quote(url)} "$d"; fi\n'
        f'git -C "$d" fetch --quiet origin {shlex.quote(revision or "HEAD")}\n'
        'git -C "$d" checkout --quiet --detach FETCH_HEAD\n'
        'echo "$d"\n'
    )


def send_commands(project: str) -> tuple[str, str]:
    """(here, there): a tar of the project's files on stdout here; unpacked into a fresh directory on the head,
    which replaces the previous copy whole (a file deleted here is gone there) and is printed."""
    src = shlex.quote(project)
    here = (
        f"if git -C {src} rev-parse --is-inside-work-tree >/dev/null 2>&1; then "
        f"git -C {src} ls-files -z --cached --others --exclude-standard | tar -C {src} --null -T - -cf -; "
        f"else tar -C {src} -cf - .; fi"
    )
    where = f"{HEAD_DIR}/dir-{head_key(project)}"
    there = (
        f'd={where}; rm -rf "$d.new" && mkdir -p "$d.new" && tar -xf - -C "$d.new" && rm -rf "$d" && '
        'mv "$d.new" "$d" && echo "$d"'
    )
    return here, there


def project_on_head(cfg: dict[str, Any], head: str, ssh_kwargs: dict[str, Any], *, offline: bool) -> str:
    """The project's directory on the head, at the recipe's revision."""
    from sparkrun.orchestration.primitives import run_script_on_host
    from sparkrun.orchestration.ssh import run_pipeline_to_remote

    project = str(cfg["project"])
    if cli.is_url(project):
        script = fetch_script(project, cfg.get("revision"), offline=offline)
        done = run_script_on_host(head, script, ssh_kwargs=ssh_kwargs, timeout=900)
        what = f"git clone/fetch of {project} on {head}"
    else:
        here, there = send_commands(project)
        done = run_pipeline_to_remote(head, here, there, timeout=900, **ssh_kwargs)
        what = f"sending {project} to {head}"
    lines = (done.stdout or "").strip().splitlines()
    if not done.success or not lines:
        raise cli.ImgbuildBuildError(
            f"{what} failed: {(done.stderr or '').strip()[-600:]}",
            done.returncode or 1,
            "launch once online (the clone stays on the head)"
            if offline and cli.is_url(project)
            else "check that sparkrun reaches the head over SSH and that git and tar are installed there",
        )
    return lines[-1].strip()


def build_on_head(cfg: dict[str, Any], variant: str, head: str, ssh_kwargs: dict[str, Any], *, offline: bool) -> str:
    """`imgbuild build --json` run on the head; the immutable tag it made there (sparkrun then fans it out)."""
    from sparkrun.orchestration.primitives import run_script_on_host

    project = project_on_head(cfg, head, ssh_kwargs, offline=offline)
    argv = cli.build_argv(cfg, project, variant, dry_run=False, offline=offline)
    # the project path is the head's own ("$HOME/..." already expanded there by the script that printed it)
    script = "set -o pipefail\n" + shlex.join(argv) + "\n"
    done = run_script_on_host(head, script, ssh_kwargs=ssh_kwargs, timeout=BUILD_TIMEOUT)
    return cli.built_ref(cli.build_doc([*argv, f"(on {head})"], _completed(done)), variant)


def _completed(done: Any) -> proc.CompletedProcess[str]:
    """sparkrun's RemoteResult as the CompletedProcess the plugin's document reader takes."""
    return proc.CompletedProcess(["ssh"], done.returncode, done.stdout or "", done.stderr or "")
