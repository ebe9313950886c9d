"""Builds: `Engine.build`, the one `docker buildx build` in src/ (one platform, or a join; `--provenance=false`,
`SOURCE_DATE_EPOCH`, `--load`), run through the docker CLI's one door, and the engine's naming race retried."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from imgbuild import proc
from imgbuild.engine.client import START_HINT, Client
from imgbuild.engine.door import docker_cli, run_cli
from imgbuild.errors import DockerError
from imgbuild.platforms import Platform

RACED = re.compile(r'image "[^"]+": already exists')  # two builds named one new image at once: Engine.build


class Builds(Client):
    """The client, and builds through buildx."""

    def build(
        self,
        context: bytes | Path,
        *,
        tags: Sequence[str],
        platforms: Sequence[Platform],
        epoch: int,
        no_cache: bool = False,
        verbose: bool = False,
        builder: str | None = None,
        compress: bool = True,
        contexts: Mapping[str, str] | None = None,
    ) -> str:
        """Build `context` (a tar for stdin, or a directory) under `tags` so that equal inputs give equal digests;
        its image id. `compress=False`: the stand-ins' layers, never pushed, where gzip is most of the time.
        `contexts`: named build contexts (`--build-context NAME=SOURCE`, e.g. an `oci-layout://` image)."""
        args = [*self._builder_args(builder), "build", "--progress", "plain", "--provenance=false"]
        args += ["--platform", ",".join(str(p) for p in platforms)]
        args += ["--load"] if compress else ["--output", "type=docker,compression=uncompressed,force-compression=true"]
        args += ["--no-cache"] if no_cache else []
        args += [a for t in tags for a in ("--tag", t)]
        args += [a for name, src in sorted((contexts or {}).items()) for a in ("--build-context", f"{name}={src}")]
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        if builder:
            env.pop("BUILDX_BUILDER", None)  # the explicit choice wins
        what = f"docker buildx build for {', '.join(map(str, platforms))} ({', '.join(tags)})"
        source, stdin = (str(context), b"") if isinstance(context, Path) else ("-", context)
        self._forget()
        try:
            self._buildx([*args, source], stdin, env, verbose, what)
        except DockerError as exc:
            # The engine's own race, not ours: BuildKit's image exporter (moby/buildkit exporter/containerimage/
            # export.go, v0.13.2 in Docker 26.1) names an image with `Images.Update`, and with `Images.Create` when
            # Update found no image of that name. Two builds that name one new image at once (two runs of one
            # project, two hosts on one daemon) can both find none; containerd's image store then refuses the
            # second Create: `image "NAME": already exists`. Plain `docker buildx build` does it too (about 1 pair
            # in 3 here; docker/buildx#3576 with buildx 0.30 and Docker 29). Nothing imgbuild can order prevents it
            # (a lock would not reach another host on the daemon), and nothing is lost: the content is stored, only
            # the name was refused. Building again (all of it cached) finds the name and updates it, so it names the
            # image equal inputs give. Not under --verbose: the log goes to the terminal, so the error is not seen
            # here, and the build fails as BuildKit said (a rerun succeeds). tests/faults/test_concurrent.py.
            if not RACED.search(exc.message):
                raise
            self._buildx([*args, source], stdin, env, verbose, what)
        self._forget()
        return self.require(tags[0]).id  # on the containerd store: the manifest (or index) digest

    def _builder_args(self, builder: str | None) -> list[str]:
        """`buildx --builder NAME`, or `--context NAME buildx` when NAME is a docker context (buildx refuses a
        docker context as `--builder`; the CLI's `--context` selects its docker-driver builder instead)."""
        if not builder:
            return ["buildx"]
        done = self._cli(["context", "inspect", builder], text=True)
        return ["--context", builder, "buildx"] if done.returncode == 0 else ["buildx", "--builder", builder]

    def _cli(self, args: list[str], **kwargs: Any) -> proc.CompletedProcess[Any]:
        """`docker ARGS` through the engine's one door to the docker CLI (engine/door.py)."""
        try:
            return run_cli(args, **kwargs)
        except proc.ToolNotFound as exc:
            raise DockerError(
                f"docker CLI {exc.tool!r} not found", hint="install docker.io, or set IMGBUILD_DOCKER"
            ) from exc

    def _buildx(self, args: list[str], stdin: bytes, env: dict[str, str], verbose: bool, what: str) -> None:
        """Run buildx to the end (proc.run kills it on an interrupt); a DockerError says why it failed."""
        done = self._cli(args, input=stdin, env=env, capture=not verbose)  # --verbose: its log on the terminal
        if done.returncode == 0:
            return
        text = ((done.stdout or b"") + (done.stderr or b"")).decode(errors="replace")
        if "is not a docker command" in text or "unknown command" in text:
            raise DockerError(
                f"`{docker_cli()} buildx` is not available: {_tail(text, 3)}",
                hint="install the buildx CLI plugin into ~/.docker/cli-plugins (`.ci/setup-host.sh` does it)",
            )
        if not self.answers():
            raise DockerError(
                f"the Docker daemon stopped answering during {what}:\n{_tail(text, 8)}",
                hint="it may have crashed: its log (`journalctl -u docker`, or /var/log/dockerd.log) says why; "
                + START_HINT,
            )
        raise DockerError(
            f"{what} failed:\n{_tail(text)}",
            hint="run with IMGBUILD_ECHO=1 to see the command; `--verbose` shows the build log",
        )


def _tail(text: str, n: int = 25) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    picked = lines[-n:]
    for ln in errors[-5:]:
        if ln not in picked:
            picked.insert(0, ln)
    return "\n".join(picked)
