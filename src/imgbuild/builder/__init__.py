"""Make the images on the engine: the bases (pulled or stand-in), the build, its history."""
