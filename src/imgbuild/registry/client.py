"""A small client for the OCI distribution API (what `docker push` speaks).

Only what publishing and locking need: manifests (get, head, put), blobs
(head, get, cross-repository mount, upload), on one keep-alive session per
registry. Authentication follows the registry's `WWW-Authenticate` challenge:
`Bearer realm=...` gets a token for the repositories this client touches
(pull on the ones it reads, pull+push on the ones it writes), `Basic` sends
the docker config's credentials. Credentials never appear in messages.

`Stats` counts what went over the wire, so callers (and tests) can show that
publishing the same inputs twice uploads nothing.

Why not a library: python-dxf refuses authentication over plain HTTP (so it
cannot log in to a loopback registry, which docker allows) and asks for a
token scoped to one repository, which a cross-repository mount cannot use;
oras-py has no blob mount; opencontainers' client is a 0.0.x port. This
module is about 300 lines on `requests`, which the docker SDK already needs.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import requests

from imgbuild import proc
from imgbuild.errors import RegistryError
from imgbuild.registry import auth as dockerauth
from imgbuild.registry.reference import Reference

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
INDEX_TYPES = (DOCKER_LIST, OCI_INDEX)
MANIFEST_TYPES = (DOCKER_MANIFEST, OCI_MANIFEST)
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
TIMEOUT = (10.0, 300.0)
USER_AGENT = "imgbuild"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Stats:
    requests: int = 0
    bytes_up: int = 0  # request bodies: blobs and manifests
    bytes_down: int = 0  # response bodies read: manifests, configs, blobs
    blobs_uploaded: list[str] = field(default_factory=list)
    blobs_mounted: list[str] = field(default_factory=list)
    blobs_present: list[str] = field(default_factory=list)
    manifests_put: list[str] = field(default_factory=list)
    manifests_present: list[str] = field(default_factory=list)

    @property
    def uploads(self) -> int:
        return len(self.blobs_uploaded) + len(self.manifests_put)

    def to_json(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "blobs_uploaded": len(self.blobs_uploaded),
            "blobs_mounted": len(self.blobs_mounted),
            "blobs_present": len(self.blobs_present),
            "manifests_put": len(self.manifests_put),
            "manifests_present": len(self.manifests_present),
        }


@dataclass(frozen=True)
class Manifest:
    data: bytes
    media_type: str
    digest: str

    def json(self) -> dict[str, object]:
        value = json.loads(self.data)
        if not isinstance(value, dict):
            raise RegistryError(f"manifest {self.digest} is not a JSON object")
        return value


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="x",service="y"` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    key, value, i = "", "", 0
    while i < len(rest):
        eq = rest.find("=", i)
        if eq < 0:
            break
        key = rest[i:eq].strip().strip(",").strip()
        i = eq + 1
        if i < len(rest) and rest[i] == '"':
            end = rest.find('"', i + 1)
            end = len(rest) if end < 0 else end
            value = rest[i + 1 : end]
            i = end + 1
        else:
            end = rest.find(",", i)
            end = len(rest) if end < 0 else end
            value = rest[i:end].strip()
            i = end
        params[key.lower()] = value
        while i < len(rest) and rest[i] in ", ":
            i += 1
    return scheme.lower(), params


def _normal_scope(scope: str) -> str:
    """`repository:a/b:push,pull` as this client spells it (actions sorted), so one scope is asked for once."""
    kind, sep, rest = scope.partition(":")
    name, sep2, actions = rest.rpartition(":")
    if not (sep and sep2):
        return scope
    return f"{kind}:{name}:{','.join(sorted(set(actions.split(','))))}"


class Registry:
    """One registry host. Create it with the repositories it will read and write."""

    def __init__(
        self,
        host_ref: Reference,
        *,
        credentials: dockerauth.Credentials | None = None,
        use_docker_config: bool = True,
    ) -> None:
        self.host = host_ref.host
        self.base_url = host_ref.base_url
        self.session = requests.Session()
        # Lean headers: every request carries them, and uploads are counted on the wire.
        self.session.headers.clear()
        self.session.headers["User-Agent"] = USER_AGENT
        self.stats = Stats()
        self._credentials = credentials
        self._looked_up = credentials is not None or not use_docker_config
        self._scopes: dict[str, set[str]] = {}
        self._token_scopes: frozenset[str] = frozenset()
        self._bearer: dict[str, str] | None = None  # the realm challenge, once seen
        self._auth_header: str | None = None
        self._present: set[tuple[str, str]] = set()  # (repository, digest) known to be there in this run

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- auth ----------------------------------------------------------------
    def need(self, repository: str, *actions: str) -> None:
        """Declare that this client will `actions` (pull, push) on `repository`."""
        self._scopes.setdefault(repository, set()).update(actions)

    def _scope_strings(self) -> frozenset[str]:
        return frozenset(f"repository:{r}:{','.join(sorted(a))}" for r, a in self._scopes.items())

    def credentials(self) -> dockerauth.Credentials | None:
        if not self._looked_up:
            self._credentials = dockerauth.lookup(self.host)
            self._looked_up = True
        return self._credentials

    def _authenticate(self, response: requests.Response) -> None:
        header = response.headers.get("WWW-Authenticate", "")
        scheme, params = _challenge(header)
        creds = self.credentials()
        if scheme == "basic":
            if creds is None or creds.identity_token:
                raise self._auth_error("asks for a user name and password", None)
            if self._auth_header is not None:
                raise self._auth_error("refused the credentials", creds)
            raw = f"{creds.username}:{creds.secret}".encode()
            self._auth_header = "Basic " + base64.b64encode(raw).decode()
            return
        if scheme != "bearer" or "realm" not in params:
            raise RegistryError(f"{self.host} answered 401 with an unsupported challenge {scheme or 'none'!r}")
        self._bearer = params
        scopes = self._scope_strings() | ({_normal_scope(params["scope"])} if params.get("scope") else set())
        if self._auth_header is not None and scopes <= self._token_scopes:
            raise self._auth_error("refused the token it issued", creds)
        self._fetch_token(params, scopes, creds)

    def _fetch_token(
        self, params: dict[str, str], scopes: frozenset[str] | set[str], creds: dockerauth.Credentials | None
    ) -> None:
        query = [("service", params["service"])] if "service" in params else []
        query += [("scope", s) for s in sorted(scopes)]
        realm = params["realm"]
        try:
            if creds is not None and creds.identity_token:
                form = {"grant_type": "refresh_token", "refresh_token": creds.secret, "client_id": USER_AGENT}
                form.update({"service": params.get("service", "")})
                resp = self.session.post(realm, data={**form, "scope": " ".join(sorted(scopes))}, timeout=TIMEOUT)
            else:
                auth = (creds.username, creds.secret) if creds is not None else None
                resp = self.session.get(realm, params=query, auth=auth, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise RegistryError(f"cannot reach the token service of {self.host}: {type(exc).__name__}") from None
        self.stats.requests += 1
        if resp.status_code in (401, 403):
            raise self._auth_error("'s token service refused the credentials", creds)
        if not resp.ok:
            raise RegistryError(f"the token service of {self.host} answered HTTP {resp.status_code}")
        try:
            body = resp.json()
            token = body.get("token") or body.get("access_token")
        except ValueError:
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"the token service of {self.host} returned no token")
        self._auth_header = f"Bearer {token}"
        self._token_scopes = frozenset(scopes)

    def _auth_error(self, what: str, creds: dockerauth.Credentials | None) -> RegistryError:
        who = f"; imgbuild used {creds}" if creds else f"; no credentials for {self.host} in {dockerauth.config_path()}"
        sep = "" if what.startswith("'") else " "
        return RegistryError(
            f"registry {self.host}{sep}{what}{who}",
            hint=f"run `docker login {self.host}` (imgbuild reads the docker config and its credential helpers)",
        )

    # -- requests --------------------------------------------------------------
    def _url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else urljoin(self.base_url, path)

    def request(
        self,
        method: str,
        path: str,
        *,
        ok: Iterable[int] = (200,),
        headers: dict[str, str] | None = None,
        data: bytes | Iterator[bytes] | None = None,
        stream: bool = False,
    ) -> requests.Response:
        url = self._url(path)
        ok = tuple(ok)
        for attempt in range(3):
            if self._bearer is not None and not self._scope_strings() <= self._token_scopes:
                self._fetch_token(self._bearer, self._scope_strings() | self._token_scopes, self.credentials())
            hdrs = dict(headers or {})
            if self._auth_header and urlsplit(url).netloc == urlsplit(self.base_url).netloc:
                hdrs["Authorization"] = self._auth_header
            proc.echo([method, url])
            try:
                resp = self.session.request(method, url, headers=hdrs, data=data, stream=stream, timeout=TIMEOUT)
            except requests.RequestException as exc:
                raise RegistryError(
                    f"{method} {urlsplit(url).path} on {self.host} failed: {type(exc).__name__}: {_clean(str(exc))}",
                    hint="check the network and the registry; publishing again completes an interrupted publish",
                ) from None
            self.stats.requests += 1
            if isinstance(data, bytes):
                self.stats.bytes_up += len(data)
            if resp.status_code == 401 and attempt < 2 and not isinstance(data, Iterator):
                self._authenticate(resp)
                continue
            if resp.status_code in ok:
                return resp
            raise self._error(method, url, resp)
        raise RegistryError(f"{method} {url}: authentication did not succeed")

    def _error(self, method: str, url: str, resp: requests.Response) -> RegistryError:
        detail = ""
        try:
            errors = resp.json().get("errors") or []
            detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
        except ValueError:
            detail = resp.text[:200]
        if resp.status_code in (401, 403):
            return self._auth_error(f"denied {method} {urlsplit(url).path} (HTTP {resp.status_code}: {detail})", None)
        return RegistryError(f"{method} {urlsplit(url).path} on {self.host}: HTTP {resp.status_code} {detail}".strip())

    # -- manifests ------------------------------------------------------------
    def get_manifest(self, repository: str, ref: str) -> Manifest:
        self.need(repository, "pull")
        resp = self.request("GET", f"/v2/{repository}/manifests/{ref}", headers={"Accept": ACCEPT})
        data = resp.content
        self.stats.bytes_down += len(data)
        digest = digest_of(data)
        if ref.startswith("sha256:") and digest != ref:
            raise RegistryError(
                f"{self.host}/{repository}@{ref}: the registry returned a manifest with digest {digest}"
            )
        media = resp.headers.get("Content-Type", "").split(";")[0].strip()
        if media not in (*INDEX_TYPES, *MANIFEST_TYPES):
            media = str(json.loads(data).get("mediaType", media))
        return Manifest(data, media, digest)

    def head_manifest(self, repository: str, ref: str) -> str | None:
        """The digest `ref` points to, or None when it does not exist."""
        self.need(repository, "pull")
        resp = self.request("HEAD", f"/v2/{repository}/manifests/{ref}", ok=(200, 404), headers={"Accept": ACCEPT})
        if resp.status_code == 404:
            return None
        return resp.headers.get("Docker-Content-Digest") or self.get_manifest(repository, ref).digest

    def put_manifest(self, repository: str, ref: str, data: bytes, media_type: str) -> str:
        self.need(repository, "pull", "push")
        digest = digest_of(data)
        self.request(
            "PUT", f"/v2/{repository}/manifests/{ref}", ok=(201, 200), headers={"Content-Type": media_type}, data=data
        )
        self.stats.manifests_put.append(f"{repository}:{ref}")
        return digest

    # -- blobs ----------------------------------------------------------------
    def blob_size(self, repository: str, digest: str) -> int | None:
        self.need(repository, "pull")
        resp = self.request("HEAD", f"/v2/{repository}/blobs/{digest}", ok=(200, 404))
        if resp.status_code == 404:
            return None
        return int(resp.headers.get("Content-Length", "0"))

    def get_blob(self, repository: str, digest: str) -> bytes:
        self.need(repository, "pull")
        resp = self.request("GET", f"/v2/{repository}/blobs/{digest}")
        data = resp.content
        self.stats.bytes_down += len(data)
        if digest_of(data) != digest:
            raise RegistryError(f"{self.host}/{repository}: blob {digest} arrived with digest {digest_of(data)}")
        return data

    def stream_blob(self, repository: str, digest: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        self.need(repository, "pull")
        resp = self.request("GET", f"/v2/{repository}/blobs/{digest}", stream=True)
        h = hashlib.sha256()
        for part in resp.iter_content(chunk):
            h.update(part)
            self.stats.bytes_down += len(part)
            yield part
        if "sha256:" + h.hexdigest() != digest:
            raise RegistryError(f"{self.host}/{repository}: blob {digest} arrived with another digest")

    def mount_blob(self, repository: str, digest: str, source: str) -> bool:
        """Mount `digest` from `source` (same registry) into `repository`; False if the registry would not."""
        self.need(repository, "pull", "push")
        self.need(source, "pull")
        query = urlencode({"mount": digest, "from": source})
        resp = self.request("POST", f"/v2/{repository}/blobs/uploads/?{query}", ok=(201, 202))
        if resp.status_code == 201:
            self.stats.blobs_mounted.append(digest)
            return True
        location = resp.headers.get("Location")
        if location:  # the registry opened an upload instead; close it
            self.request("DELETE", location, ok=(204, 200, 404))
        return False

    def upload_blob(self, repository: str, digest: str, data: bytes | Iterable[bytes]) -> None:
        """Upload a blob: one POST, then the body, then the digest. Skips nothing; see `ensure_blob`."""
        self.need(repository, "pull", "push")
        resp = self.request("POST", f"/v2/{repository}/blobs/uploads/", ok=(202,))
        location = resp.headers.get("Location")
        if not location:
            raise RegistryError(f"{self.host} opened an upload for {repository} without a Location")
        if isinstance(data, bytes):
            self.request("PUT", _with_query(location, digest=digest), ok=(201,), data=data,
                         headers={"Content-Type": "application/octet-stream"})  # fmt: skip
        else:
            counted = _counting(data, self.stats)
            resp = self.request("PATCH", location, ok=(202,), data=counted,
                                headers={"Content-Type": "application/octet-stream"})  # fmt: skip
            location = resp.headers.get("Location") or location
            self.request("PUT", _with_query(location, digest=digest), ok=(201,))
        self.stats.blobs_uploaded.append(digest)

    def ensure_blob(
        self,
        repository: str,
        digest: str,
        data: bytes | None = None,
        *,
        mount_from: str | None = None,
        copy_from: tuple[Registry, str] | None = None,
    ) -> str:
        """Make `digest` present in `repository`: "present", "mounted", "uploaded" or "copied".

        A mount is tried first when possible (one request, which also succeeds
        when the blob is already there); otherwise a HEAD decides.
        """
        key = (repository, digest)
        if key in self._present:
            return "present"
        how = self._ensure(repository, digest, data, mount_from, copy_from)
        self._present.add(key)
        return how

    def _ensure(
        self,
        repository: str,
        digest: str,
        data: bytes | None,
        mount_from: str | None,
        copy_from: tuple[Registry, str] | None,
    ) -> str:
        if mount_from and mount_from != repository and self.mount_blob(repository, digest, mount_from):
            return "mounted"
        if self.blob_size(repository, digest) is not None:
            self.stats.blobs_present.append(digest)
            return "present"
        if data is not None:
            self.upload_blob(repository, digest, data)
            return "uploaded"
        if copy_from is not None:
            src, src_repo = copy_from
            self.upload_blob(repository, digest, src.stream_blob(src_repo, digest))
            return "copied"
        raise RegistryError(f"{self.host}/{repository}: blob {digest} is missing and imgbuild has no copy of it")


def _with_query(url: str, **extra: str) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(extra.items())
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


def _counting(chunks: Iterable[bytes], stats: Stats) -> Iterator[bytes]:
    for c in chunks:
        stats.bytes_up += len(c)
        yield c


def _clean(message: str) -> str:
    """Connection errors can be long; URLs here never carry credentials."""
    return message[:300]


class Registries:
    """One client per registry host, shared by every step of a run (publish, bake --matrix): the one cache."""

    def __init__(self, factory: Callable[[Reference], Registry] = Registry) -> None:
        self.factory = factory
        self.clients: dict[str, Registry] = {}

    def get(self, ref: Reference) -> Registry:
        if ref.host not in self.clients:
            self.clients[ref.host] = self.factory(ref)
        return self.clients[ref.host]

    def stats(self) -> Stats:
        total = Stats()
        for c in self.clients.values():
            s = c.stats
            total.requests += s.requests
            total.bytes_up += s.bytes_up
            total.bytes_down += s.bytes_down
            total.blobs_uploaded += s.blobs_uploaded
            total.blobs_mounted += s.blobs_mounted
            total.blobs_present += s.blobs_present
            total.manifests_put += s.manifests_put
            total.manifests_present += s.manifests_present
        return total

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

    def __enter__(self) -> Registries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
