"""From image to cluster: launch profiles, sparkrun recipes and compose files, and the sparkrun builder plugin."""
