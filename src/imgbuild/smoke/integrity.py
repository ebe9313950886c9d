"""Is the image exactly what imgbuild built: the base's layers plus imgbuild's own, ENV and labels as planned
(an image edited after the build still carries imgbuild's labels). Pure but for `reference`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imgbuild.engine import Engine, ImageInfo
from imgbuild.plan import labels as lbl
from imgbuild.platforms import Platform

NOTED = 3  # differences named per check; the rest are counted


@dataclass(frozen=True)
class Reference:
    """What an image must sit on: its base (and imgbuild's layers on top: `own` of them)."""

    base_ref: str
    base: ImageInfo | None  # None: not in the local store
    own: int

    def describe(self) -> str:
        base = f"{len(self.base.layers)} base" if self.base else "? base"
        return f"{base} + {self.own} imgbuild layer{'s' if self.own != 1 else ''}"


def _short(diff_id: str | None) -> str:
    return "?" if diff_id is None else diff_id.removeprefix("sha256:")[:12]


def cut(value: str | None, n: int = 60) -> str:
    """`value` for a message: quoted, at most `n` characters."""
    if value is None:
        return "nothing"
    return repr(value if len(value) <= n else value[:n] + "...")


def _noted(problems: list[str]) -> list[str]:
    return problems if len(problems) <= NOTED else [*problems[:NOTED], f"and {len(problems) - NOTED} more"]


def layer_problems(actual: Sequence[str], base: Sequence[str], own: int) -> list[str]:
    """Each layer where the image is not `base` followed by `own` layers of imgbuild's (any diff id)."""
    expected: list[tuple[str, str | None]] = [(f"base layer {i}", d) for i, d in enumerate(base)]
    expected += [(f"imgbuild layer {j}", None) for j in range(own)]
    problems = []
    for i in range(max(len(actual), len(expected))):
        if i >= len(expected):
            problems.append(
                f"layer {i} ({_short(actual[i])}) is neither the base's nor imgbuild's "
                "(added after the build: a `docker commit` or a later RUN/COPY?)"
            )
        elif i >= len(actual):
            problems.append(f"layer {i} missing: expected {expected[i][0]} {_short(expected[i][1])}")
        elif expected[i][1] is not None and expected[i][1] != actual[i]:
            problems.append(
                f"layer {i}: expected {expected[i][0]} {_short(expected[i][1])}, image has {_short(actual[i])}"
            )
    return _noted(problems)


def expected_env(base_env: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
    """The base's ENV with the variant's set over it (as Dockerfile `ENV` does)."""
    return {**dict(e.partition("=")[::2] for e in base_env), **env}


def env_problems(actual: Sequence[str], expected: Mapping[str, str]) -> list[str]:
    return _exact("ENV", dict(e.partition("=")[::2] for e in actual), expected)


def label_problems(actual: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    return _exact("label", actual, expected)


def _exact(what: str, have: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """Each key where `have` is not exactly `expected`: every key with its value, and no other key."""
    problems = []
    for key in sorted(set(have) | set(expected)):
        if key not in have:
            problems.append(f"{what} {key}: missing, plan says {cut(expected[key])}")
        elif key not in expected:
            problems.append(f"{what} {key}={cut(have[key])}: not in the plan (nor the base)")
        elif have[key] != expected[key]:
            problems.append(f"{what} {key}: image has {cut(have[key])}, plan says {cut(expected[key])}")
    return _noted(problems)


def config_label_problems(
    actual: Mapping[str, str], config: lbl.ConfigLabel, base: Mapping[str, str] | None
) -> list[str]:
    """Labels against the `imgbuild.config` label (no plan at hand); extra keys only when the base is known."""
    problems = []
    for key in sorted(config.labels):
        if key not in actual:
            problems.append(f"label {key}: missing (imgbuild set it)")
        elif not config.matches(key, actual[key]):
            problems.append(
                f"label {key}: changed after the build (imgbuild wrote sha256 {config.labels[key]}..., "
                f"image has {cut(actual[key])})"
            )
    if base is not None:
        for key in sorted(set(actual) - set(config.labels) - {lbl.INPUTS, lbl.CONFIG}):
            if key not in base:
                problems.append(f"label {key}={cut(actual[key])}: set by neither imgbuild nor the base")
            elif base[key] != actual[key]:
                problems.append(f"label {key}: image has {cut(actual[key])}, the base {cut(base[key])}")
    return _noted(problems)


def reference(engine: Engine, base_ref: str, base_id: str | None, own: int, platform: Platform) -> Reference:
    """The base (by id when known, else by name), when it is in the store for `platform`."""
    base = (engine.image(base_id) if base_id else None) or (engine.image(base_ref) if base_ref else None)
    return Reference(base_ref, base if base is not None and base.platform == platform else None, own)
