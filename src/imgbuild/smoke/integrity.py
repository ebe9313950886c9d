"""Is the image exactly what imgbuild built: the base's layers plus imgbuild's own, and the planned config?

An image edited after the build (`docker commit`, a later `RUN`, `LABEL` or
`ENV`) still carries imgbuild's labels, so the labels alone prove nothing.
This compares, by diff id and in order, the image's layers with its base's
followed by imgbuild's layer images', and its ENV and labels with the plan's
(or, without a plan, with its `imgbuild.config` label). Every difference is
named: the layer index and diff ids, the key, expected and actual.

The comparisons are pure; `reference` reads the base and the top layer image
from the daemon.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imgbuild.engine import Engine, ImageInfo
from imgbuild.plan import labels as lbl
from imgbuild.platforms import Platform

NOTED = 3  # differences named per check; the rest are counted


@dataclass(frozen=True)
class Reference:
    """What an image must sit on: its base, and the diff ids of imgbuild's own layers."""

    base_ref: str
    base: ImageInfo | None  # None: not in the local store
    own: tuple[str | None, ...]  # bottom first; None where the layer image could not be read
    note: str = ""  # why some own diff ids are unknown


def _short(diff_id: str | None) -> str:
    return "?" if diff_id is None else diff_id.removeprefix("sha256:")[:12]


def layer_problems(actual: Sequence[str], base: Sequence[str], own: Sequence[str | None]) -> list[str]:
    """Each layer where the image is not `base` + `own` (None in `own`: any diff id is accepted there)."""
    expected: list[tuple[str, str | None]] = [(f"base layer {i}", d) for i, d in enumerate(base)]
    expected += [(f"imgbuild layer {j}", d) for j, d in enumerate(own)]
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


def _noted(problems: list[str]) -> list[str]:
    if len(problems) <= NOTED:
        return problems
    return [*problems[:NOTED], f"and {len(problems) - NOTED} more"]


def _env_map(env: Sequence[str]) -> dict[str, str]:
    out = {}
    for entry in env:
        key, _, value = entry.partition("=")
        out[key] = value
    return out


def expected_env(base_env: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
    """The base's ENV with the variant's set over it (as Dockerfile `ENV` does)."""
    return {**_env_map(base_env), **env}


def env_problems(actual: Sequence[str], expected: Mapping[str, str]) -> list[str]:
    return _exact("ENV", _env_map(actual), expected)


def label_problems(actual: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """Exact: every key of `expected` with its value, and no other key."""
    return _exact("label", actual, expected)


def _exact(what: str, have: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """Each key where `have` is not `expected` (ENV or labels against the plan)."""
    problems = []
    for key in sorted(set(have) | set(expected)):
        if key not in have:
            problems.append(f"{what} {key}: missing, plan says {_cut(expected[key])}")
        elif key not in expected:
            problems.append(f"{what} {key}={_cut(have[key])}: not in the plan (nor the base)")
        elif have[key] != expected[key]:
            problems.append(f"{what} {key}: image has {_cut(have[key])}, plan says {_cut(expected[key])}")
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
                f"image has {_cut(actual[key])})"
            )
    if base is not None:
        for key in sorted(set(actual) - set(config.labels) - {lbl.INPUTS, lbl.CONFIG}):
            if key not in base:
                problems.append(f"label {key}={_cut(actual[key])}: set by neither imgbuild nor the base")
            elif base[key] != actual[key]:
                problems.append(f"label {key}: image has {_cut(actual[key])}, the base {_cut(base[key])}")
    return _noted(problems)


def _cut(value: str | None, n: int = 60) -> str:
    if value is None:
        return "nothing"
    return repr(value if len(value) <= n else value[:n] + "...")


def reference(
    engine: Engine,
    base_ref: str,
    base_id: str | None,
    layer_digests: Sequence[str],
    platform: Platform,
    layer_ref: str | None = None,
) -> Reference:
    """The base (by id when known, else by name) and imgbuild's own diff ids, read from its top layer image.

    A layer image sits on the base and adds one layer per imgbuild layer; a
    removed one leaves those diff ids unknown: only their count is checked.
    """
    base = engine.image(base_id) if base_id else None
    if base is None and base_ref:
        base = engine.image(base_ref)
    if base is not None and base.platform != platform:
        base = None
    n = len(layer_digests)
    if not n:
        return Reference(base_ref, base, ())
    unknown = (None,) * n
    if base is None:
        return Reference(base_ref, None, unknown)

    def is_top(i: ImageInfo) -> bool:
        return i.labels.get(lbl.LAYER) == layer_digests[-1] and lbl.INPUTS not in i.labels and i.platform == platform

    named = engine.image(layer_ref) if layer_ref else None  # the plan names it: one inspect, not a listing
    if named is not None and is_top(named):
        top: ImageInfo | None = named
    else:
        top = next((i for i in engine.labelled(lbl.LAYER, layer_digests[-1]) if is_top(i)), None)
    if top is None:
        return Reference(base_ref, base, unknown, f"no {platform} layer image {layer_digests[-1][:12]} in the store")
    if len(top.layers) != len(base.layers) + n or top.layers[: len(base.layers)] != base.layers:
        return Reference(base_ref, base, unknown, f"layer image {top.id[:19]} does not sit on the base")
    return Reference(base_ref, base, tuple(top.layers[len(base.layers) :]))


def describe(ref: Reference, own: int) -> str:
    base = f"{len(ref.base.layers)} base" if ref.base else "? base"
    known = sum(1 for d in ref.own if d is not None)
    text = f"{base} + {own} imgbuild layer{'s' if own != 1 else ''}"
    if known < own:
        text += f" (imgbuild's counted, not compared: {ref.note or 'layer image not found'})"
    return text
