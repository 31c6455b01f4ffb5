"""Cold reads: evicted files leave the page cache, and the check that says so reads nothing."""

import os

import pytest

from perfsuite.data import page_cache
from perfsuite.data.page_cache import PageCacheUnavailable


def _file(tmp_path, size=1 << 20):
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(size))
    path.read_bytes()
    return path


def test_evict_drops_a_read_file_and_a_read_brings_it_back(tmp_path):
    path = _file(tmp_path)
    try:
        eviction = page_cache.evict_or_fail([path])
    except PageCacheUnavailable as error:
        pytest.skip(f"this filesystem keeps its pages: {error}")
    assert eviction.files == 1 and eviction.still_cached == ()
    assert page_cache.cached_fraction(path) == 0.0  # the check itself read nothing back in
    path.read_bytes()
    assert page_cache.cached_fraction(path) == 1.0


def test_an_empty_file_has_nothing_cached(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert page_cache.cached_fraction(empty) == 0.0


def test_a_platform_without_fadvise_is_named(monkeypatch, tmp_path):
    monkeypatch.delattr(os, "posix_fadvise")
    with pytest.raises(PageCacheUnavailable, match="os.posix_fadvise"):
        page_cache.evict([_file(tmp_path)])
