"""The pinned vLLM release: the cache mirror, the only git funnel, and what --onto accepts."""
