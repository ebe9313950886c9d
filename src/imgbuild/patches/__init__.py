"""Patch files and what applying them means: pure logic over trees, no side effects."""
