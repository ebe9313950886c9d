"""The page cache, for measurements and tests that need it cold or partly warm:
evicting a memory-mapped file's pages for real, reading exactly chosen pages
in, and asking which are resident (``mincore``). Standard library and numpy
only, so the GPU tier and the CPU benchmarks share it."""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
PAGE = mmap.PAGESIZE


def resident_fraction(mapping: mmap.mmap) -> float:
    """The fraction of `mapping`'s pages in the page cache (mincore)."""
    size = len(mapping)
    pages = (size + PAGE - 1) // PAGE
    vec = np.zeros(pages, dtype=np.uint8)
    address = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    if _libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec.ctypes.data_as(ctypes.c_void_p)):
        raise OSError(ctypes.get_errno(), "mincore")
    return float((vec & 1).sum()) / pages


def resident_pages(mapping: mmap.mmap, pages: np.ndarray) -> np.ndarray:
    """Whether each of `pages` (page numbers in `mapping`'s file) is in the
    page cache (mincore)."""
    size = len(mapping)
    vec = np.zeros((size + PAGE - 1) // PAGE, dtype=np.uint8)
    address = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    if _libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec.ctypes.data_as(ctypes.c_void_p)):
        raise OSError(ctypes.get_errno(), "mincore")
    return (vec[pages] & 1).astype(bool)


def read_pages(path: str, pages: np.ndarray) -> None:
    """Bring exactly `pages` of the file into the page cache (read-ahead off)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for page in pages.tolist():
            os.pread(fd, PAGE, page * PAGE)
    finally:
        os.close(fd)


def evict(tables: list[Any]) -> float:
    """Drop Engram disk tables' pages from the page cache for real: unmap
    them from this process first (posix_fadvise DONTNEED leaves mapped pages
    alone), then drop them. Returns the residency left (mincore), which a
    cold measurement asserts is 0."""
    worst = 0.0
    for table in tables:
        table.mapping.madvise(mmap.MADV_DONTNEED)
        for path in table.paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)  # dirty pages (a fresh export) are not dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        worst = max(worst, resident_fraction(table.mapping))
    return worst
