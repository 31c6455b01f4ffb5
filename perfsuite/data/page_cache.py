"""Cold reads: evict a dataset's files from the page cache, and check that it worked.

A loader benchmark reads files the previous round left in memory, so it measures memory, not the disk
a dataset larger than RAM is read from (MLPerf runs start without the data in memory). ``evict`` asks
the kernel to drop each file's cached pages (``posix_fadvise(POSIX_FADV_DONTNEED)``, after writing out
dirty pages, which it would keep) and then checks with ``mincore`` that none is left. A platform or filesystem that does not honour either
raises ``PageCacheUnavailable`` naming what failed, which a benchmark turns into a skip.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from perfsuite.errors import PerfsuiteError
from perfsuite.records import Record


class PageCacheUnavailable(PerfsuiteError, RuntimeError):
    """Files cannot be evicted from the page cache here (no posix_fadvise / RWF_NOWAIT, or ignored)."""


@dataclass(frozen=True)
class Eviction(Record):
    """What ``evict`` did: files asked, and those still cached afterwards (dirty pages, a filesystem
    that ignores the advice)."""

    files: int
    still_cached: tuple[str, ...]


def cached_fraction(path: Path | str) -> float:
    """Share of ``path``'s pages in the page cache, by mincore(2) on a read-only mapping (which, unlike
    a probing read, triggers no read-ahead)."""
    libc = _libc()
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    page = os.sysconf("SC_PAGE_SIZE")
    pages = (size + page - 1) // page
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise PageCacheUnavailable(f"{path}: expected mmap to map the file, found "
                                       f"{os.strerror(ctypes.get_errno())}")
        try:
            vector = (ctypes.c_ubyte * pages)()
            if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) != 0:
                raise PageCacheUnavailable(f"{path}: expected mincore to report cached pages, found "
                                           f"{os.strerror(ctypes.get_errno())}")
            return sum(byte & 1 for byte in vector) / pages
        finally:
            libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))
    finally:
        os.close(fd)


def _libc():
    _require_platform()
    libc = ctypes.CDLL(None, use_errno=True)
    if not all(hasattr(libc, name) for name in ("mmap", "mincore", "munmap")):
        raise PageCacheUnavailable("expected the C library's mmap, mincore and munmap, found them missing")
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    return libc


def _drop(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # dirty pages are not dropped: write them out first
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def evict(paths: Iterable[Path | str]) -> Eviction:
    """Drop each file's pages from the page cache; report the files with any page cached afterwards
    (all dropped first, then all checked: a file another reader took in again meanwhile counts)."""
    _require_platform()
    paths = [str(p) for p in paths]
    for path in paths:
        _drop(path)
    return Eviction(files=len(paths), still_cached=tuple(p for p in paths if cached_fraction(p) > 0))


PROBES = 3  # files checked right after their own eviction before evict_or_fail says the advice is ignored


def evict_or_fail(paths: Iterable[Path | str]) -> Eviction:
    """``evict``, raising PageCacheUnavailable when the kernel ignores the advice: each of the first
    PROBES files still cached when checked right after its own eviction. Judged file by file, not on
    the whole eviction: a reader elsewhere (another process, a pipeline's prefetch) may take files in
    again between dropping them all and checking them all, which says nothing about the filesystem."""
    _require_platform()
    paths = [str(p) for p in paths]
    probes = paths[:PROBES]
    kept = []
    for path in probes:
        _drop(path)
        if cached_fraction(path) > 0:
            kept.append(path)
    if probes and len(kept) == len(probes):
        raise PageCacheUnavailable(f"expected POSIX_FADV_DONTNEED to drop cached files, found {len(probes)} of "
                                   f"{len(probes)} still cached right after their eviction (e.g. {kept[0]}): "
                                   "this filesystem ignores it")
    return evict(paths)


def _require_platform() -> None:
    missing = [name for name in ("posix_fadvise", "POSIX_FADV_DONTNEED", "fdatasync")
               if not hasattr(os, name)]
    if missing:
        raise PageCacheUnavailable(f"expected os.{', os.'.join(missing)} to evict files from the page cache, "
                                   "found them missing on this platform")
