"""What the images will be, as pure functions: layers, labels, Dockerfiles, build plans, bake."""
