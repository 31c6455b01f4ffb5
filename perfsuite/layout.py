"""Decoding a file in the graph from the layout preflight read: the header is parsed once, in Python,
and only verified on every read.

Parsing headers in the graph is the dominant cost of a TF-native loader, measured in a tf.data map
(2 workers, 2 cores, benchmarks/test_loaders.py::test_decode_ratio): ``tf.audio.decode_wav`` costs
several times the read itself, and the TF `.npy` parser (perfsuite.npy.decode_npy) about 100 µs
a file. Preflight already reads every header (``check_tf_readable``, ``check_npy``) to name unreadable
files before training starts; what it learns is kept here as a FileLayout: the file's bytes before
its data, its size, where the data lies and in which byte order.

On every read the graph compares the file's first bytes and its size with the layout, byte for byte,
and decodes the data with ``tf.io.decode_raw`` only if both match; a file changed since preflight (a
new header, another size) is an error naming the file and what its header now says, never data read
with a stale layout. A change that keeps both header and size leaves the data where the layout says,
so what is decoded is the file's current data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from perfsuite import _tfenv  # noqa: F401  (quiets TensorFlow before its import)

import tensorflow as tf  # noqa: E402

# Bytes of a changed file's start quoted in the error: enough for a .npy or WAV header.
_QUOTED_BYTES = 160


@dataclass(frozen=True)
class FileLayout:
    """Where a file's data lies, as preflight read it."""

    head: bytes  # every byte before the data: magic, header, other chunks
    file_size: int
    data_bytes: int  # bytes decoded: the data's whole items
    big_endian: bool = False

    @property
    def data_offset(self) -> int:
        return len(self.head)


def layout_columns(layouts: list[FileLayout], prefix: str) -> dict[str, list]:
    """The layouts as columns for ``tf.data.Dataset.from_tensor_slices``, names under ``prefix``."""
    columns = {
        f"{prefix}_head": [layout.head for layout in layouts],
        f"{prefix}_size": [layout.file_size for layout in layouts],
        f"{prefix}_data_bytes": [layout.data_bytes for layout in layouts],
    }
    if any(layout.big_endian for layout in layouts):  # else the graph decodes little-endian only
        columns[f"{prefix}_big_endian"] = [layout.big_endian for layout in layouts]
    return columns


@tf.autograph.experimental.do_not_convert  # plain graph ops; nothing for autograph to rewrite
def decode_with_layout(raw, columns, prefix: str, *, dtype, path, what: str):
    """The data of ``raw`` (a whole file's bytes) as a flat tensor of ``dtype``, after checking that the
    file still has the layout in ``columns`` (one element of ``layout_columns``).

    ``what`` names the kind of file in the error ("WAV", ".npy").
    """
    dtype = tf.as_dtype(dtype)
    head = columns[f"{prefix}_head"]
    size, data_bytes = (tf.cast(columns[f"{prefix}_{name}"], tf.int64) for name in ("size", "data_bytes"))
    start = tf.constant(0, tf.int64)
    offset = tf.cast(tf.strings.length(head), tf.int64)
    file_size = tf.cast(tf.strings.length(raw), tf.int64)
    unchanged = tf.equal(tf.strings.substr(raw, start, offset), head) & tf.equal(file_size, size)
    checked = tf.debugging.Assert(unchanged, [
        f"cannot read {what} file", path,
        f"expected the header and size it had when the loader was built; found (size then, size now, "
        "file start now)", size, file_size, readable(tf.strings.substr(raw, start, _QUOTED_BYTES))])
    with tf.control_dependencies([checked]):
        big_endian = columns.get(f"{prefix}_big_endian")
        if big_endian is None:
            return tf.io.decode_raw(tf.strings.substr(raw, offset, data_bytes), dtype)
        return decode_in_order(raw, offset, data_bytes, dtype=dtype, big_endian=big_endian)


def decode_in_order(raw, offset, length, *, dtype, big_endian):
    """decode_raw in the file's byte order, without a branch: the other order's input is empty.

    (The concat copies the data once more; a tf.cond would cost more.)
    """
    if dtype.size == 1:
        return tf.io.decode_raw(tf.strings.substr(raw, offset, length), dtype)
    zero = tf.constant(0, length.dtype)
    little = tf.io.decode_raw(tf.strings.substr(raw, offset, tf.where(big_endian, zero, length)), dtype)
    big = tf.io.decode_raw(tf.strings.substr(raw, offset, tf.where(big_endian, length, zero)), dtype,
                           little_endian=False)
    return tf.concat([little, big], axis=0)


def readable(data):
    """Bytes made valid UTF-8 for a message (Python decodes error messages as UTF-8)."""
    return tf.strings.unicode_transcode(data, "UTF-8", "UTF-8", errors="replace")


def read_layout(path, *, data_offset: int, data_bytes: int, big_endian: bool = False) -> FileLayout:
    """The layout of ``path`` whose header preflight has just checked: its bytes before the data and its size."""
    with open(path, "rb") as file:
        head = file.read(data_offset)
        file_size = os.fstat(file.fileno()).st_size
    return FileLayout(head=head, file_size=file_size, data_bytes=data_bytes, big_endian=big_endian)
