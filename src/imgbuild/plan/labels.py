"""Image labels (pure): OCI keys plus `imgbuild.*`, all derived from the inputs (`created` too), so equal inputs give
byte-equal image configs."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from imgbuild.config.models import GitSource, UpstreamPin
from imgbuild.errors import ConfigError
from imgbuild.patches.variants import VariantPlan
from imgbuild.registry import reference

OCI = "org.opencontainers.image."
PREFIX = "imgbuild."
FORMAT = "1"

BASE_LOCAL = f"{PREFIX}base"  # the local name of a base with no registry origin (no OCI base.name/base.digest)
# Keys every image built by imgbuild carries; smoke relies on them.
REQUIRED = (
    f"{OCI}version",
    f"{OCI}created",
    f"{OCI}title",
    f"{PREFIX}format",
    f"{PREFIX}variant",
    f"{PREFIX}upstream.url",
    f"{PREFIX}upstream.commit",
    f"{PREFIX}series",
    f"{PREFIX}patches",
    f"{PREFIX}files",
    f"{PREFIX}site-packages",
    f"{PREFIX}layers",
    f"{PREFIX}inputs",
)
# vLLM's license and this project's; image.labels may override it.
LICENSES = "Apache-2.0"
INPUTS = f"{PREFIX}inputs"
CONFIG = f"{PREFIX}config"
ENTRYPOINT = f"{PREFIX}entrypoint"  # "keep" when the variant kept its base's passthrough ENTRYPOINT; else absent
SKELETON = f"{PREFIX}skeleton"
# Every pin when a project has several: [{name, url, tag, commit, package_root, patches}], the first pin
# (also in imgbuild.upstream.*) first, `patches` the applied ones of that upstream. Absent with one pin.
UPSTREAMS = f"{PREFIX}upstreams"
# The overrides of patches/upstream.yaml: [{pin, requirement, version, reason}], one per pin whose `override:`
# replaces another pin's requirement on it (e.g. vLLM's flashinfer-python==0.7.3 by 0.7.4). Absent without one.
OVERRIDES = f"{PREFIX}overrides"


@dataclass(frozen=True)
class Upstream:
    """The pinned release as labels describe it."""

    url: str
    tag: str
    version: str
    commit: str
    name: str = ""
    package_root: str = ""

    @classmethod
    def from_pin(cls, pin: UpstreamPin) -> Upstream:
        if isinstance(pin.source, GitSource):
            url = pin.source.url
        else:  # a package URL: names the release without naming an index host
            url = pin.source.url or f"pkg:pypi/{pin.source.project}@{pin.source.version}"
        return cls(
            url=url, tag=pin.tag, version=pin.version, commit=pin.commit, name=pin.name, package_root=pin.package_root
        )


def upstreams_label(plan: VariantPlan, upstreams: Sequence[Upstream], patch_upstreams: Mapping[str, str]) -> str:
    """`imgbuild.upstreams`: each pin and the patches of the variant applied to it."""
    first = upstreams[0].name if upstreams else ""
    return compact(
        [
            {
                "name": u.name,
                "url": u.url,
                "tag": u.tag,
                "commit": u.commit,
                "package_root": u.package_root,
                "patches": [n for n in plan.variant.selected if patch_upstreams.get(n, first) == u.name],
            }
            for u in upstreams
        ]
    )


@dataclass(frozen=True)
class Source:
    """This project's repository and commit, when known (OCI `source` and `revision`)."""

    url: str | None = None
    revision: str | None = None


def qualified(ref: str) -> str:
    """A reference as docker resolves it: `vllm/vllm-openai:v1` -> `docker.io/vllm/vllm-openai:v1`."""
    return str(reference.parse(ref))


def source_url(remote: str) -> str | None:
    """A git remote as a browsable https URL, credentials dropped; None if it is not a network remote."""
    text = remote.strip()
    m = re.match(r"^[\w.-]+@([\w.-]+):(.+)$", text)  # scp-like: git@host:owner/repo.git
    if m and "://" not in text:
        text = f"https://{m[1]}/{m[2]}"
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("https", "http", "ssh") or not parts.hostname:
        return None
    keep_port = parts.port and parts.scheme != "ssh"  # an ssh port is not the web server's
    host = parts.hostname + (f":{parts.port}" if keep_port else "")
    path = parts.path.removesuffix(".git").rstrip("/")
    return f"https://{host}{path}"


def source_date(last_updates: Sequence[str], upstream_commit_time: int) -> str:
    """`created` for every image of a project: the newest of its inputs' dates (a DEP-3 Last-Update,
    YYYY-MM-DD, counts as midnight UTC; an unparseable one is skipped)."""
    dates = [dt.datetime.fromtimestamp(upstream_commit_time, tz=dt.UTC)]
    for value in last_updates:
        with contextlib.suppress(ValueError):
            dates.append(dt.datetime.combine(dt.date.fromisoformat(value.strip()[:10]), dt.time(), dt.UTC))
    return max(dates).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(created: str) -> int:
    """SOURCE_DATE_EPOCH for a `created` value (`source_date`'s format)."""
    return int(dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp())


def compact(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=False)


def files_label(plan: VariantPlan) -> str:
    """{"path": [state, sha256] or [state, sha256, pristine sha256]} (pristine only when it differs)."""
    out: dict[str, list[str | None]] = {}
    for f in file_labels(plan):
        entry: list[str | None] = [f.state, f.sha256]
        if f.pristine_sha256 != f.sha256:
            entry.append(f.pristine_sha256)
        out[f.path] = entry
    return compact(out)


def patches_label(plan: VariantPlan) -> str:
    return compact(
        {**dict.fromkeys(plan.variant.selected, "applied"), **dict.fromkeys(plan.variant.reverted, "reverted")}
    )


@dataclass(frozen=True)
class FileLabel:
    path: str
    state: str
    sha256: str
    pristine_sha256: str | None


def file_labels(plan: VariantPlan) -> list[FileLabel]:
    """What `imgbuild.files` says of `plan`, straight from the plan (what parse_files reads back)."""
    return [FileLabel(f.path, f.state, f.sha256, f.pristine_sha256) for f in plan.files]


def parse_files(value: str) -> list[FileLabel]:
    data = json.loads(value)
    if not isinstance(data, dict):
        raise ValueError("imgbuild.files is not a JSON object")
    out = []
    for path, entry in data.items():
        if not isinstance(entry, list) or len(entry) not in (2, 3):
            raise ValueError(f"imgbuild.files[{path!r}] is not [state, sha256(, pristine)]")
        pristine = entry[2] if len(entry) == 3 else entry[1]
        out.append(FileLabel(str(path), str(entry[0]), str(entry[1]), None if pristine is None else str(pristine)))
    return out


@dataclass(frozen=True)
class ProjectInputs:
    upstream: Upstream  # the first pin: the images' version
    series_digest: str
    created: str
    source: Source = field(default_factory=Source)
    upstreams: tuple[Upstream, ...] = ()  # every pin, the first first; empty: just `upstream`
    patch_upstreams: tuple[tuple[str, str], ...] = ()  # patch name -> its pin's name (several pins only)
    overrides: tuple[tuple[str, str, str, str], ...] = ()  # (pin, requirement, version, reason) per pin's override
    # each patch in series order: (name, filename, sha256, Last-Update), and the newest pinned commit's time; with
    # them a variant's `created` and `imgbuild.series` cover only the patches it applies (variant_series)
    patches: tuple[tuple[str, str, str, str], ...] = ()
    commit_time: int = 0


def variant_series(inputs: ProjectInputs, selected: Sequence[str]) -> tuple[str, str]:
    """(`created`, series digest) of an image applying the patches `selected`: a patch it leaves out is in
    neither, so an edit of it makes no new image of this variant (without `inputs.patches`: the project's)."""
    if not inputs.patches:
        return inputs.created, inputs.series_digest
    chosen = set(selected)
    mine = [p for p in inputs.patches if p[0] in chosen]
    h = hashlib.sha256()
    for _, filename, sha256, _ in mine:
        h.update(f"{filename}\0{sha256}\n".encode())
    return source_date([p[3] for p in mine], inputs.commit_time), h.hexdigest()


def image_labels(
    plan: VariantPlan,
    inputs: ProjectInputs,
    *,
    base_ref: str,
    base_digest: str | None,
    site_packages: str,
    layers: Sequence[str],
    title: str,
    source: Source | None,
    local_base: str = "",
) -> dict[str, str]:
    """Every label of a variant image except `imgbuild.inputs` (which hashes these). `base_ref` empty: a base with
    no registry origin (a stand-in built here), named by `local_base` in `imgbuild.base` only."""
    user, upstream, upstreams = dict(plan.variant.image.labels), inputs.upstream, inputs.upstreams
    created, series = variant_series(inputs, plan.variant.selected)
    for key in user:
        if key.startswith(PREFIX):
            raise ConfigError(
                f"images/{plan.variant.name}.yaml: image.labels: {key!r} is reserved (imgbuild.* labels are computed)",
                hint="choose another key",
            )
    known = {
        f"{OCI}source": source.url if source else None,
        f"{OCI}revision": source.revision if source else None,
        f"{OCI}base.digest": base_digest,
        f"{OCI}description": plan.variant.description or None,
    }
    labels = {
        f"{OCI}version": upstream.version,
        f"{OCI}created": created,
        f"{OCI}title": title,
        f"{OCI}licenses": LICENSES,
        **({f"{OCI}base.name": qualified(base_ref)} if base_ref else {BASE_LOCAL: local_base} if local_base else {}),
        **{k: v for k, v in known.items() if v},
        **user,
        f"{PREFIX}format": FORMAT,
        f"{PREFIX}variant": plan.variant.name,
        f"{PREFIX}upstream.url": upstream.url,
        f"{PREFIX}upstream.tag": upstream.tag,
        f"{PREFIX}upstream.commit": upstream.commit,
        f"{PREFIX}series": series,
        f"{PREFIX}patches": patches_label(plan),
        f"{PREFIX}files": files_label(plan),
        f"{PREFIX}site-packages": site_packages,
        f"{PREFIX}layers": compact(list(layers)),
    }
    if len(upstreams) > 1:  # absent with one pin, so a single-upstream project's images are as they were
        labels[UPSTREAMS] = upstreams_label(plan, upstreams, dict(inputs.patch_upstreams))
    if inputs.overrides:  # absent without one, so the other images' labels are unchanged
        keys = ("pin", "requirement", "version", "reason")
        labels[OVERRIDES] = compact([dict(zip(keys, o, strict=True)) for o in inputs.overrides])
    if plan.variant.image.entrypoint == "keep":  # absent otherwise, so the other images' labels are unchanged
        labels[ENTRYPOINT] = "keep"
    labels[CONFIG] = config_label(labels, plan.variant.image.env)
    return dict(sorted(labels.items()))


def _short_sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def config_label(labels: Mapping[str, str], env: Sequence[tuple[str, str]]) -> str:
    """`imgbuild.config`: the variant's ENV and a short sha256 of each label imgbuild sets, so that
    `smoke IMAGE` can name a label or variable changed after the build without the plan."""
    hashed = {k: _short_sha(v) for k, v in sorted(labels.items()) if k not in (INPUTS, CONFIG)}
    return compact({"env": dict(env), "labels": hashed})


@dataclass(frozen=True)
class ConfigLabel:
    env: dict[str, str]
    labels: dict[str, str]  # key -> short sha256 of its value

    def matches(self, key: str, value: str) -> bool:
        return self.labels.get(key) == _short_sha(value)


def parse_config(value: str) -> ConfigLabel:
    data = json.loads(value)
    if not isinstance(data, dict) or not isinstance(data.get("env"), dict) or not isinstance(data.get("labels"), dict):
        raise ValueError('imgbuild.config is not {"env": {...}, "labels": {...}}')
    return ConfigLabel(
        {str(k): str(v) for k, v in data["env"].items()}, {str(k): str(v) for k, v in data["labels"].items()}
    )


def missing_required(labels: Mapping[str, str]) -> list[str]:
    return [k for k in REQUIRED if k not in labels]
