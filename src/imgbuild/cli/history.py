"""`imgbuild history VARIANT`: the variant's immutable tags in the local store, newest first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from imgbuild.cli.build import RepoOpt
from imgbuild.cli.options import JsonOpt

if TYPE_CHECKING:
    from imgbuild.patches.variants import ResolvedVariant


def history(
    variant: Annotated[str, typer.Argument(metavar="VARIANT", help="Image variant (a file in images/).")],
    repository: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List VARIANT's immutable tags (REPO:<version>-<inputs digest>) present in the local image store.

    Newest first (when this machine built each; a tag built before imgbuild
    kept that record sorts by the engine's last tag time), each with what its
    labels say: the upstream release and commit, the patches applied and
    reverted (series digest, file states), the base name and digest, the
    `created` date of its inputs, its platform(s), and which of the variant's
    moving tags name it now. A multi-platform variant's joined image is listed
    under its own immutable tag. `imgbuild rollback` moves the moving tags back
    to one of these.

    Examples:

      imgbuild history latest

      imgbuild history engram-mem --json
    """
    from imgbuild.builder import history as hist
    from imgbuild.engine import Engine
    from imgbuild.project import load_project
    from imgbuild.report.history import history_lines
    from imgbuild.report.tables import console, print_json
    from imgbuild.upstream.mirror import cache_dir

    project = load_project()
    repo, moving = _refs(project.variant(variant), repository)
    found = hist.read(Engine.connect(), cache_dir(), repo, variant, moving)
    if as_json:
        print_json("history", found.to_json())
        return
    for line in history_lines(found):
        console.print(line, markup=False, highlight=False)


def _refs(variant: ResolvedVariant, repository: str | None) -> tuple[str, tuple[str, ...]]:
    """The variant's repository (--repository first) and its moving refs."""
    from imgbuild.errors import ConfigError

    repo = repository or variant.image.repository
    if not repo:
        raise ConfigError(
            f"images/{variant.name}.yaml: image.repository is not set (nor inherited through from:)",
            hint="set image.repository, or pass --repository",
        )
    return repo, tuple(f"{repo}:{t}" for t in variant.image.tags or ())
