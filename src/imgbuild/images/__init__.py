"""Build plans, layers and labels, the only docker funnel, build, smoke, inspect, publish."""
