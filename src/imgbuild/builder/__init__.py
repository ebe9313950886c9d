"""Make the images on the engine: the bases (pulled or stand-in) and the build."""
