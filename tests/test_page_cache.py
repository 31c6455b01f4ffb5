"""Cold reads: evicted files leave the page cache, and the check that says so reads nothing."""

import os

import pytest

from perfsuite.data import page_cache
from perfsuite.data.page_cache import PageCacheUnavailable


def _file(tmp_path, size=1 << 20, name="data.bin"):
    path = tmp_path / name
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


def test_files_taken_in_again_after_their_eviction_are_counted_not_blamed_on_the_filesystem(monkeypatch, tmp_path):
    paths = [_file(tmp_path, 1 << 16, name=f"f{i}.bin") for i in range(4)]
    real_evict = page_cache.evict

    def evict_while_a_reader_takes_them_back(files):  # a pipeline elsewhere reads every file again
        real_evict(files)
        for path in paths:
            path.read_bytes()
        return page_cache.Eviction(files=len(paths), still_cached=tuple(str(p) for p in paths
                                                                        if page_cache.cached_fraction(p) > 0))

    if page_cache.evict([paths[0]]).still_cached:
        pytest.skip("this filesystem keeps its pages")
    monkeypatch.setattr(page_cache, "evict", evict_while_a_reader_takes_them_back)
    eviction = page_cache.evict_or_fail(paths)
    assert eviction.files == 4 and len(eviction.still_cached) == 4


def test_advice_the_kernel_ignores_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, offset, length, advice: None)
    with pytest.raises(PageCacheUnavailable, match="3 of 3 still cached right after their eviction.*ignores it"):
        page_cache.evict_or_fail([_file(tmp_path, name=f"d{i}.bin") for i in range(3)])
