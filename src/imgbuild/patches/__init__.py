"""Patch files and what applying them means. Writes nothing: it reads patch files and `series` (patchfile.py,
series.py) and applies to trees in memory (hunks.py and apply.py are pure; a pinned tree is read through git);
carrying a patch onto another release (carry.py, renames.py) runs git through `upstream/`."""
