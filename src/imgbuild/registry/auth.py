"""Registry credentials from the user's docker config, as the docker CLI finds them.

`$DOCKER_CONFIG/config.json` (default `~/.docker/config.json`):
`credHelpers[host]` first, then `credsStore`, then `auths[host]` (`auth` is
base64 `user:password`, or `username`/`password`). Helpers are run as
`docker-credential-NAME get` with the server on stdin. Secrets never reach a
message, a repr or a log line: `Credentials` hides them.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from imgbuild import proc
from imgbuild.errors import RegistryError
from imgbuild.registry.reference import DOCKER_HUB, DOCKER_HUB_AUTH_KEY


@dataclass(frozen=True)
class Credentials:
    username: str
    secret: str = field(repr=False)
    source: str = ""  # where they came from, for messages: "config.json auths", "helper pass"
    identity_token: bool = False  # the secret is an OAuth2 refresh token, not a password

    def __str__(self) -> str:
        return f"user {self.username!r} (from {self.source})"


def config_path() -> Path:
    root = os.environ.get("DOCKER_CONFIG")
    return Path(root) / "config.json" if root else Path.home() / ".docker" / "config.json"


def _server_key(host: str) -> str:
    return DOCKER_HUB_AUTH_KEY if host == DOCKER_HUB else host


def _normalize(key: str) -> str:
    """`https://host/v1/` and `http://host` and `host` all name `host`."""
    k = key.removeprefix("https://").removeprefix("http://")
    k = k.split("/", 1)[0]
    return DOCKER_HUB if k in ("index.docker.io", "registry-1.docker.io", DOCKER_HUB) else k


def load_config(path: Path | None = None) -> dict[str, object]:
    path = path or config_path()
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RegistryError(f"{path}: not a readable docker config: {exc}") from exc
    return data if isinstance(data, dict) else {}


def lookup(host: str, path: Path | None = None) -> Credentials | None:
    """Credentials for registry `host` (e.g. `127.0.0.1:5000`, `docker.io`), or None."""
    config = load_config(path)
    helpers = config.get("credHelpers")
    if isinstance(helpers, dict):
        for key, helper in helpers.items():
            if _normalize(str(key)) == host and isinstance(helper, str) and helper:
                return run_helper(helper, _server_key(host), host)
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        found = run_helper(store, _server_key(host), host)
        if found is not None:
            return found
    auths = config.get("auths")
    if isinstance(auths, dict):
        for key, entry in auths.items():
            if _normalize(str(key)) == host and isinstance(entry, dict):
                return _from_entry(entry, host)
    return None


def _from_entry(entry: dict[str, object], host: str) -> Credentials | None:
    token = entry.get("identitytoken")
    auth = entry.get("auth")
    user, secret = entry.get("username"), entry.get("password")
    if isinstance(auth, str) and auth:
        try:
            decoded = base64.b64decode(auth, validate=False).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise RegistryError(
                f"the docker config entry for {host} has an `auth` that is not base64 user:password"
            ) from exc
        if ":" not in decoded:
            raise RegistryError(f"the docker config entry for {host} has an `auth` without a colon (not user:password)")
        user, secret = decoded.split(":", 1)
    if isinstance(token, str) and token:
        return Credentials(str(user or "<token>"), token, "config.json identitytoken", identity_token=True)
    if isinstance(user, str) and isinstance(secret, str) and user:
        return Credentials(user, secret, "config.json auths")
    return None


def run_helper(helper: str, server: str, host: str) -> Credentials | None:
    exe = f"docker-credential-{helper}"
    try:
        done = proc.run([exe, "get"], input=server.encode(), timeout=60)
    except proc.ToolNotFound as exc:
        raise RegistryError(
            f"the docker config names credential helper {helper!r}, but {exe} is not on PATH",
            hint="install the helper, or remove credsStore/credHelpers from the docker config",
        ) from exc
    except proc.ToolTimeout as exc:
        raise RegistryError(f"{exe} get did not answer within 60 s for {host}") from exc
    if done.returncode != 0:
        out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
        if "credentials not found" in out.lower():
            return None
        # The helper's output is not echoed: it might contain a secret.
        raise RegistryError(f"{exe} get failed for {host} (exit {done.returncode})")
    try:
        data = json.loads(done.stdout)
        user, secret = str(data["Username"]), str(data["Secret"])
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"{exe} get for {host} did not print {{Username, Secret}} JSON") from exc
    if user == "<token>":
        return Credentials(user, secret, f"helper {helper}", identity_token=True)
    return Credentials(user, secret, f"helper {helper}")
