"""perfsuite.files.write_atomic: the whole new content or the old file, never a temp left behind."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from perfsuite import files


def test_text_and_bytes_are_written_whole(tmp_path):
    path = tmp_path / "a.txt"
    files.write_atomic(path, "héllo")
    assert path.read_text(encoding="utf-8") == "héllo"
    files.write_atomic(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("old")

    def fail(*args):
        raise OSError("disk full")
    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(OSError):
        files.write_atomic(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_the_written_file_is_readable_as_a_plain_file_is(tmp_path):
    path = tmp_path / "a.txt"
    files.write_atomic(path, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_a_file_object_writer_replaces_the_file_only_when_its_block_ends_cleanly(tmp_path):
    path = tmp_path / "a.npy"
    with files.atomic_target(path) as handle:
        np.save(handle, np.arange(3), allow_pickle=False)
        assert not path.exists()
    assert np.load(path).tolist() == [0, 1, 2]
    with pytest.raises(ValueError), files.atomic_target(path) as handle:
        handle.write(b"partial")
        raise ValueError("writer failed")
    assert np.load(path).tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["a.npy"]
