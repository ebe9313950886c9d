"""What the images will be: layers, labels, Dockerfiles, build plans and the bake file, as pure functions, but for
inputs.py, which reads the pins' commit dates and this project's commit through git, and bake.py's `write_*` and
`check`, which write and read `buildkit/`."""
