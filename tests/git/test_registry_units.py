"""Fast tests (no docker, no registry) for references, docker credentials, layers and configs."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from imgbuild.errors import ConfigError, RegistryError
from imgbuild.images import oci as ocilayer
from imgbuild.registry import auth as dockerauth
from imgbuild.registry import reference
from imgbuild.registry.client import _challenge


@pytest.mark.parametrize(
    ("text", "host", "repo", "tag", "scheme"),
    [
        ("vllm/vllm-openai:v0.33.0", "docker.io", "vllm/vllm-openai", "v0.33.0", "https"),
        ("debian", "docker.io", "library/debian", None, "https"),
        ("127.0.0.1:5000/vllm-dsv41:latest", "127.0.0.1:5000", "vllm-dsv41", "latest", "http"),
        ("localhost/a/b", "localhost", "a/b", None, "http"),
        ("ghcr.io/acme/vllm-dsv41:engram-mem", "ghcr.io", "acme/vllm-dsv41", "engram-mem", "https"),
    ],
)
def test_reference_parse(text: str, host: str, repo: str, tag: str | None, scheme: str) -> None:
    ref = reference.parse(text)
    assert (ref.host, ref.repository, ref.tag, ref.scheme) == (host, repo, tag, scheme)


def test_reference_digest_and_errors() -> None:
    d = "sha256:" + "a" * 64
    ref = reference.parse(f"127.0.0.1:5000/x/y:t@{d}")
    assert ref.ref == d and str(ref) == f"127.0.0.1:5000/x/y:t@{d}"
    assert reference.parse("vllm/vllm-openai:v1").api_host == "registry-1.docker.io"
    assert reference.join("ghcr.io/acme", "vllm-dsv41", "latest").name == "ghcr.io/acme/vllm-dsv41"
    for bad in ("UPPER/case", "x@sha256:zz", "a/b:bad tag"):
        with pytest.raises(ConfigError):
            reference.parse(bad)


def test_www_authenticate_challenge() -> None:
    scheme, params = _challenge(
        'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"'
    )
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.example/token",
        "service": "registry.example",
        "scope": "repository:a/b:pull,push",
    }
    assert _challenge('Basic realm="imgbuild-test-registry"') == ("basic", {"realm": "imgbuild-test-registry"})


def _write_config(path: Path, data: dict[str, object]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(data))


def test_credentials_from_auths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    auth = base64.b64encode(b"alice:s3cret:with:colons").decode()
    _write_config(tmp_path, {"auths": {"http://127.0.0.1:5000": {"auth": auth}, "https://index.docker.io/v1/": {}}})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    creds = dockerauth.lookup("127.0.0.1:5000")
    assert creds is not None and (creds.username, creds.secret) == ("alice", "s3cret:with:colons")
    assert "s3cret" not in repr(creds) and "s3cret" not in str(creds)
    assert dockerauth.lookup("127.0.0.1:5001") is None
    assert dockerauth.lookup("docker.io") is None


def test_credentials_from_a_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real credential helper executable speaking the docker-credential protocol."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    helper = bindir / "docker-credential-imgbuildtest"
    helper.write_text(
        "#!/bin/sh\n"
        "read server\n"
        'if [ "$server" = "registry.example" ]; then\n'
        '  echo \'{"ServerURL":"registry.example","Username":"bob","Secret":"hunter2"}\'\n'
        "else echo 'credentials not found in native keychain'; exit 1; fi\n"
    )
    helper.chmod(helper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    _write_config(tmp_path / "cfg", {"credHelpers": {"registry.example": "imgbuildtest"}, "credsStore": "imgbuildtest"})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "cfg"))
    creds = dockerauth.lookup("registry.example")
    assert creds is not None and (creds.username, creds.secret) == ("bob", "hunter2")
    assert creds.source == "helper imgbuildtest"
    assert dockerauth.lookup("other.example") is None  # the store says "not found"


def test_missing_helper_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path, {"credsStore": "does-not-exist-imgbuild"})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    with pytest.raises(RegistryError, match="docker-credential-does-not-exist-imgbuild is not on PATH"):
        dockerauth.lookup("ghcr.io")


def test_layer_bytes_are_deterministic_and_valid() -> None:
    files = {"usr/local/lib/python3.12/dist-packages/vllm/a.py": b"x = 1\n", "usr/lib/b.txt": b"b"}
    one, two = (
        ocilayer.make_layer(files, 1_700_000_000),
        ocilayer.make_layer(dict(reversed(files.items())), 1_700_000_000),
    )
    assert one == two
    raw = one.blob.data
    assert raw[:10] == ocilayer.GZIP_HEADER  # no name, mtime 0, OS unknown
    tar_bytes = gzip.decompress(raw)
    assert one.diff_id == "sha256:" + __import__("hashlib").sha256(tar_bytes).hexdigest()
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and "usr/local/lib/python3.12/dist-packages/vllm" in names
    assert {(m.uid, m.gid, m.mtime) for m in members} == {(0, 0, 1_700_000_000)}
    assert {m.mode for m in members if m.isdir()} == {0o755} and {m.mode for m in members if m.isfile()} == {0o644}
    assert ocilayer.make_layer(files, 1).blob.digest != one.blob.digest  # the mtime is an input


def test_derived_config_clears_entrypoint_and_appends() -> None:
    base = {
        "architecture": "arm64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin", "A=1"], "Entrypoint": ["vllm", "serve"], "Cmd": ["x"], "Labels": {"k": "v"}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]},
        "history": [{"created_by": "base"}],
        "container_config": {"Hostname": "builder"},
    }
    layer = ocilayer.make_layer({"a/b.py": b"1"}, 0)
    cfg = ocilayer.derive_config(
        base,
        layers=[layer],
        layer_names=["L"],
        env=[("A", "2"), ("B", "3")],
        labels={"imgbuild.variant": "latest"},
        created="2026-11-01T00:00:00Z",
        comment="metadata",
    )
    inner = cfg["config"]
    assert inner["Entrypoint"] is None and inner["Cmd"] is None
    assert inner["Env"] == ["PATH=/bin", "A=2", "B=3"]
    assert inner["Labels"] == {"k": "v", "imgbuild.variant": "latest"}
    assert cfg["rootfs"]["diff_ids"][-1] == layer.diff_id and len(cfg["rootfs"]["diff_ids"]) == 2
    assert cfg["created"] == "2026-11-01T00:00:00Z" and cfg["history"][-1]["empty_layer"] is True
    assert "container_config" not in cfg and base["config"]["Entrypoint"] == ["vllm", "serve"]  # base untouched
    assert ocilayer.canonical_json(cfg) == ocilayer.canonical_json(json.loads(ocilayer.canonical_json(cfg)))


def test_layer_digest_is_pinned_across_machines() -> None:
    """A golden digest: a Python whose deflate differs (zlib-ng, another level) would change every
    published blob digest, so it should fail here first, not in a registry."""
    files = {
        "usr/local/lib/python3.12/dist-packages/vllm/a.py": b"".join(
            b"def f%d():\n    return %d\n" % (i, i) for i in range(200)
        )
    }
    layer = ocilayer.make_layer(files, 1793491200)
    assert layer.diff_id == "sha256:764258c64489e18b687b7abf52f379ea91726e976f2bf38a596016b06301e72d"
    assert layer.blob.digest == "sha256:bc033c0732d32b36a9b0b546212071d62a3d02b5e33ea54219d1f28e6af60df5"
