"""Checks on a built image: imports, integrity, what a launcher needs."""
