"""From image to cluster: launch profiles, sparkrun recipes, and the sparkrun builder plugin."""
