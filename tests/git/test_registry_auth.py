"""registry.py against a real registry with Bearer auth, in the fast tier: no Docker engine.

Debian's docker-registry (`auth: token`) and tests/support/tokenserver.py's token service run on
loopback and start in a fraction of a second; every request below is real HTTP. Covered: the
401 challenge, the token fetch with the scopes declared, one token reused, a wider token when
a new repository is needed, and each failure's message (refused credentials, a token the
registry refuses, an unreachable token service or registry, a missing manifest).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from imgbuild.errors import RegistryError
from imgbuild.registry import reference
from imgbuild.registry.auth import Credentials
from imgbuild.registry.client import OCI_MANIFEST, Registry
from tests.support.registry_env import RegistryProcess, free_port
from tests.support.tokenserver import TokenService, start_token_registry

SECRET = "tok-Pw-4417-never-printed"

pytestmark = pytest.mark.skipif(shutil.which("docker-registry") is None, reason="needs Debian's docker-registry")


@dataclass
class Guarded:
    registry: RegistryProcess
    tokens: TokenService

    def client(self, repository: str = "team/app", *, password: str | None = SECRET) -> Registry:
        creds = Credentials("ci", password, "test") if password is not None else None
        return Registry(
            reference.parse(f"{self.registry.host}/{repository}"), credentials=creds, use_docker_config=False
        )


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    tokens = TokenService({"ci": SECRET})
    registry = start_token_registry(tmp_path_factory.mktemp("tokreg"), tokens)
    try:
        yield Guarded(registry, tokens)
    finally:
        registry.stop()
        tokens.close()


def _push_image(reg: Registry, repository: str, tag: str) -> str:
    """A one-layer image: two blobs, then the manifest. Returns the manifest's digest."""
    layer = b"layer bytes " + repository.encode()
    config = json.dumps({"architecture": "arm64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
    digests = {data: "sha256:" + hashlib.sha256(data).hexdigest() for data in (layer, config)}
    for data, digest in digests.items():
        reg.upload_blob(repository, digest, data)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digests[config],
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digests[layer],
                    "size": len(layer)}],
    }  # fmt: skip
    return reg.put_manifest(repository, tag, json.dumps(manifest).encode(), OCI_MANIFEST)


def test_challenge_then_one_token_for_the_declared_scopes(guarded: Guarded) -> None:
    guarded.tokens.requests.clear()
    with guarded.client() as reg:
        digest = _push_image(reg, "team/app", "v1")
        assert reg.head_manifest("team/app", "v1") == digest
        assert reg.get_manifest("team/app", digest).digest == digest
    # one token, asked for by the user with exactly the scope the client declared, reused for every request
    assert guarded.tokens.requests == [("ci", ["repository:team/app:pull,push"])]
    assert reg.stats.requests >= 7  # 401, token, 2 x (POST + PUT), PUT manifest, HEAD, GET


def test_a_new_repository_widens_the_token(guarded: Guarded) -> None:
    with guarded.client() as reg:
        _push_image(reg, "team/base", "v1")
        guarded.tokens.requests.clear()
        reg.need("team/base", "pull")
        reg.need("team/app2", "pull", "push")
        layer = b"layer bytes team/base"
        assert reg.mount_blob("team/app2", "sha256:" + hashlib.sha256(layer).hexdigest(), "team/base")
    assert guarded.tokens.requests == [("ci", ["repository:team/app2:pull,push", "repository:team/base:pull,push"])]
    assert reg.stats.blobs_mounted


def test_refused_credentials_name_the_user_and_how_to_log_in(guarded: Guarded) -> None:
    for password, who in (("wrong", "user 'ci' (from test)"), (None, "no credentials for")):
        with guarded.client(password=password) as reg, pytest.raises(RegistryError) as err:
            reg.head_manifest("team/app", "v1")
        assert "token service refused the credentials" in err.value.message and who in err.value.message
        assert err.value.hint and f"docker login {guarded.registry.host}" in err.value.hint
        assert SECRET not in err.value.message and "wrong" not in err.value.message


def test_a_token_the_registry_does_not_trust_is_not_retried_forever(guarded: Guarded) -> None:
    trusted = guarded.tokens.key
    guarded.tokens.key = ec.generate_private_key(ec.SECP256R1())  # signs with a key the registry does not know
    try:
        guarded.tokens.requests.clear()
        with guarded.client() as reg, pytest.raises(RegistryError, match="refused the token it issued") as err:
            reg.head_manifest("team/app", "v1")
        assert len(guarded.tokens.requests) == 1 and err.value.hint and "docker login" in err.value.hint
    finally:
        guarded.tokens.key = trusted


def test_errors_of_a_missing_manifest_and_unreachable_services(guarded: Guarded, tmp_path: Path) -> None:
    with guarded.client() as reg:
        assert reg.head_manifest("team/app", "no-such-tag") is None
        with pytest.raises(
            RegistryError, match=r"GET /v2/team/app/manifests/no-such-tag on .*: HTTP 404 MANIFEST_UNKNOWN"
        ):
            reg.get_manifest("team/app", "no-such-tag")
    # the token service is gone: a registry that points at it cannot hand out tokens
    gone = TokenService({"ci": SECRET})
    orphan = start_token_registry(tmp_path / "orphan", gone)
    try:
        gone.close()
        with Registry(reference.parse(f"{orphan.host}/team/app"), credentials=Credentials("ci", SECRET, "test"),
                      use_docker_config=False) as reg, pytest.raises(RegistryError) as err:  # fmt: skip
            reg.head_manifest("team/app", "v1")
        assert err.value.message == f"cannot reach the token service of {orphan.host}: ConnectionError"
    finally:
        orphan.stop()
    # nothing listens at all: one line naming the request and the host, and what to do
    host = f"127.0.0.1:{free_port()}"
    with (
        Registry(reference.parse(f"{host}/team/app"), use_docker_config=False) as reg,
        pytest.raises(RegistryError) as err,
    ):
        reg.head_manifest("team/app", "v1")
    assert err.value.message.startswith(f"HEAD /v2/team/app/manifests/v1 on {host} failed: ConnectionError")
    assert err.value.hint and "publishing again completes an interrupted publish" in err.value.hint
