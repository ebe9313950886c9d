"""Docker daemons of other nodes, for `imgbuild ship`: the docker funnel (docker_engine.Engine) pointed elsewhere.

A node is named as docker names it: `ssh://user@host` (docker's own ssh
transport, through the `ssh` client), `tcp://host:port`, `unix:///path`, or
a docker context name (resolved with `docker context inspect`). Everything
here goes through Engine's error mapping, so a dead node is one DockerError
that names it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

import docker
import docker.errors
import requests

from imgbuild.deploy.ssh import SSHDial
from imgbuild.errors import DockerError
from imgbuild.images.docker import Engine, context_host

SCHEMES = ("ssh://", "tcp://", "unix://", "npipe://", "http://", "https://")


def resolve_node(spec: str) -> str:
    """The daemon URL for a --to value: a URL as is, a docker context name through `docker context inspect`."""
    if spec.startswith(SCHEMES):
        return spec
    host, why = context_host(spec)
    if not host:
        raise DockerError(
            f"{spec}: not a docker URL or context ({why})",
            hint="give ssh://user@host, tcp://host:port, unix:///path or a name from `docker context ls`",
        )
    return host


class NodeEngine(Engine):
    """One node's daemon."""

    def __init__(self, client: docker.DockerClient, cli: str, name: str, url: str, dial: SSHDial | None = None) -> None:
        super().__init__(client, cli)
        self.name = name
        self.url = url
        self._dial = dial

    @classmethod
    def connect_node(cls, name: str, timeout: float = 30.0) -> NodeEngine:
        url = resolve_node(name)
        dial = SSHDial(url) if url.startswith("ssh://") else None
        try:
            client = docker.DockerClient(base_url=dial.url if dial else url, version="auto", timeout=int(timeout))
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            if dial is not None:
                dial.close()
            raise DockerError(
                f"node {name}: cannot reach its Docker daemon at {url}: {exc}",
                hint="check that the node is up and that `docker -H URL info` works from here",
            ) from exc
        return cls(client, "docker", name, url, dial)

    def close(self) -> None:
        self.client.close()
        if self._dial is not None:
            self._dial.close()

    def layer_chains(self) -> list[tuple[str, ...]]:
        """The diff-id list of every image the node holds (what `docker load` will not need again)."""
        chains = []
        for summary in self._call(self.client.api.images):
            try:
                attrs = self._call(self.client.api.inspect_image, summary["Id"])
            except docker.errors.NotFound:
                continue  # removed while we looked
            chains.append(tuple((attrs.get("RootFS") or {}).get("Layers") or ()))
        return chains

    def load_stream(self, chunks: Iterable[bytes]) -> list[dict[str, Any]]:
        """POST a docker-archive to /images/load as it is produced; the daemon's messages, errors raised."""
        try:
            messages = list(self.client.api.load_image(chunks, quiet=True))
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            raise DockerError(f"node {self.name}: docker load failed: {exc}") from exc
        for m in messages:
            problem = m.get("error") or m.get("errorDetail") or (m.get("message") if "stream" not in m else None)
            if problem:
                raise DockerError(f"node {self.name}: docker load failed: {problem}")
        return messages

    def containerd_store(self) -> bool:
        """Whether the node keeps images in containerd (docker 24+ with containerd-snapshotter)."""
        status = self._call(self.client.info).get("DriverStatus") or []
        return any(pair[:2] == ["driver-type", "io.containerd.snapshotter.v1"] for pair in status)

    def pull_ref(self, ref: str) -> None:
        """Pull `ref` (REGISTRY/REPO@sha256:...) into the node."""
        repo, _, digest = ref.partition("@")
        try:
            for m in self.client.api.pull(repo, tag=digest, stream=True, decode=True):
                if m.get("error") or m.get("errorDetail"):
                    raise DockerError(f"node {self.name}: docker pull {ref} failed: {m.get('error')}")
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise DockerError(f"node {self.name}: docker pull {ref} failed: {exc}") from exc

    def tag_image(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        self._call(self.client.api.tag, image_id, repo, tag)


_DIGEST_IN_STATUS = re.compile(r"digest: (sha256:[0-9a-f]{64})")


def push_local(engine: Engine, image_id: str, ref: str) -> str:
    """Tag `image_id` as `ref` here, push it, untag it; the manifest digest the registry has."""
    engine.tag(image_id, ref)
    digest = None
    try:
        repo, _, tag = ref.rpartition(":")
        for m in engine.client.api.push(repo, tag=tag, stream=True, decode=True):
            if m.get("error") or m.get("errorDetail"):
                raise DockerError(f"docker push {ref} failed: {m.get('error')}")
            aux = m.get("aux") or {}
            # 20.10 reports the digest in `aux`; 26 with the containerd store only
            # in the final status line ("TAG: digest: sha256:... size: N").
            found = _DIGEST_IN_STATUS.search(str(m.get("status") or ""))
            digest = aux.get("Digest") or (found.group(1) if found else None) or digest
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise DockerError(f"docker push {ref} failed: {exc}") from exc
    finally:
        engine.untag(ref)
    if not digest:
        raise DockerError(f"docker push {ref}: the daemon reported no digest")
    return str(digest)


def save_chunks(engine: Engine, image_id: str) -> Iterator[bytes]:
    """`docker save IMAGE` as a stream of chunks, from the local daemon."""
    try:
        yield from engine.client.api.get_image(image_id, chunk_size=1 << 20)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise DockerError(f"docker save {image_id} failed: {exc}") from exc


def copy_save(engine: Engine, image_id: str, out: IO[bytes]) -> int:
    size = 0
    for chunk in save_chunks(engine, image_id):
        out.write(chunk)
        size += len(chunk)
    return size
