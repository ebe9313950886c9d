"""`python3 -m imgbuild`: the same entry point as the `imgbuild` console script."""

from imgbuild.cli.main import run

run()
