"""The pinned upstream releases (vLLM, and any pin under `also:`): the cache mirror, the git and pip funnels, and
what --onto accepts."""
