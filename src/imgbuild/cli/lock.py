"""`imgbuild lock`: pin each variant's base to a digest per platform in images.lock."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.options import JsonOpt
from imgbuild.errors import CheckFailed

if TYPE_CHECKING:
    from imgbuild.project import Project


def lock(
    check: Annotated[
        bool, typer.Option("--check", help="Fail (exit 1) when images.lock is missing, stale or lacks a platform.")
    ] = False,
    offline: Annotated[
        bool,
        typer.Option("--offline", help="With --check: compare with images/ and patches/ only, not the registries."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Resolve each variant's base tag to a digest per platform and write images.lock.

    Builds and publishes take the base by digest from the lock.

    Examples:

      imgbuild lock

      imgbuild lock --check            # CI: fail when the lock is stale

      imgbuild lock --check --offline  # without asking the registries
    """
    from imgbuild.cli.options import load_project
    from imgbuild.registry import lock as lockmod
    from imgbuild.report.documents import images as docs
    from imgbuild.report.tables import console, print_json

    project = load_project()
    variants = list(project.variants.values())
    pin = project.pin
    more = [(p.name, p.tag, p.commit) for p in project.pins[1:]]  # every further pin is locked too
    if check:
        current = lockmod.load_lock(project.root)
        resolve = None if offline else lockmod.resolve_base
        problems = lockmod.check(current, variants, pin.tag, pin.commit, project.series_digest, resolve, more)
        checked = lockmod.LockChecked(problems=problems + runtime_locks(project))
        if as_json:
            print_json(docs.LOCK_CHECK.of(checked))
        if not checked.ok:
            raise CheckFailed(
                f"{lockmod.FILENAME} is stale:\n  " + "\n  ".join(checked.problems),
                hint="run `imgbuild lock` and commit images.lock; a runtime lock: "
                "`imgbuild skeleton --runtime --relock --platform P`",
                reported=as_json,
            )
        if not as_json:
            console.print(f"{lockmod.FILENAME} is up to date ({len(variants)} variants)")
        return
    new = lockmod.make_lock(variants, pin.tag, pin.commit, project.series_digest, more=more)
    changed = lockmod.write_lock(project.root, new)
    if as_json:
        print_json(docs.LOCK.of(new.written(changed)))
        return
    for ref, base in sorted(new.bases.items()):
        console.print(f"{ref} -> {base.digest}", soft_wrap=True)
        for platform, digest in base.platforms:
            console.print(f"  {platform}: {digest}", soft_wrap=True)
    console.print(f"{lockmod.FILENAME} {'written' if changed else 'unchanged'}")


def runtime_locks(project: Project) -> list[str]:
    """Each runtime lock (images/runtime-lock/<os>-<arch>.txt) that does not hold every pin at its release."""
    from imgbuild.builder import runtime_lock as rl
    from imgbuild.builder.bases import runtime_lock_problems
    from imgbuild.platforms import Platform

    out: list[str] = []
    for path in sorted((project.root / rl.LOCK_DIR).glob("*-*.txt")):
        os_name, _, arch = path.stem.partition("-")
        platform = Platform.parse(f"{os_name}/{arch}")
        out += runtime_lock_problems(project, rl.load_lock(project.root, platform))
    return out
