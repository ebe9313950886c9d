"""A token service for docker-registry's `auth: token` mode, so Bearer auth runs for real.

The registry answers 401 with `WWW-Authenticate: Bearer realm=...,service=...,
scope=...`; the client asks this service (HTTP Basic) for a JWT granting the
scopes, signed ES256 by a key whose self-signed certificate the registry
trusts (`rootcertbundle`). Every token request is recorded.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from tests.support.registry_env import RegistryProcess, free_port

ISSUER = "imgbuild-test-issuer"
SERVICE = "imgbuild-test-registry"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def libtrust_key_id(key: ec.EllipticCurvePublicKey) -> str:
    """The `kid` distribution expects: base32 of the first 240 bits of sha256(DER), in groups of 4."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    b32 = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(b32[i : i + 4] for i in range(0, len(b32), 4))


@dataclass
class TokenService:
    users: dict[str, str]
    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    requests: list[tuple[str | None, list[str]]] = field(default_factory=list)  # (user, scopes)

    def __post_init__(self) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                user = service.check(self.headers.get("Authorization"))
                scopes = query.get("scope", [])
                service.requests.append((user, scopes))
                if user is None:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"token": service.token(user, scopes), "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def check(self, header: str | None) -> str | None:
        if not header or not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user if self.users.get(user) == password else None

    def token(self, user: str, scopes: list[str]) -> str:
        access = []
        for scope in scopes:
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": user, "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": _b64(os.urandom(12)), "access": access}  # fmt: skip
        header = {"typ": "JWT", "alg": "ES256", "kid": libtrust_key_id(self.key.public_key())}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        der = self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def write_cert(self, path: Path) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .sign(self.key, hashes.SHA256())
        )
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_token_registry(directory: Path, service: TokenService) -> RegistryProcess:
    """docker-registry with `auth: token` pointing at `service` (start-registry.sh knows only htpasswd)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = directory / "root.crt"
    service.write_cert(cert)
    port = free_port()
    config = directory / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: info\n"
        f"storage:\n  filesystem:\n    rootdirectory: {directory}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        f"auth:\n  token:\n    realm: {service.realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n"
        f"    rootcertbundle: {cert}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    with (directory / "registry.log").open("ab") as log:
        proc = subprocess.Popen(
            ["docker-registry", "serve", str(config)], stdout=log, stderr=log, env=env, start_new_session=True
        )
    reg = RegistryProcess(directory, port, proc.pid)
    import urllib.error
    import urllib.request

    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                return reg
        except OSError:
            pass
        time.sleep(0.1)
    reg.stop()
    raise RuntimeError(f"docker-registry (token auth) did not start; see {directory / 'registry.log'}")
