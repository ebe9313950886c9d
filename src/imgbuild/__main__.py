from imgbuild.cli.main import run

run()
