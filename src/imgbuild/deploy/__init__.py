"""From image to cluster: launcher recipes, compose files and shipping to nodes."""
