"""Decoding a file in the graph from the layout preflight read: the header is parsed once, in Python,
and only verified on every read.

Parsing headers in the graph costs a TF-native loader much of its time (``tf.audio.decode_wav`` and
the TF ``.npy`` parser against ``tf.io.decode_raw``: ``python scripts/measure_decode_cost.py``; figures
in docs/measurement.md, "Decoding headers").
benchmarks/test_loaders.py::test_loader_ratio[preflight_over_in_graph_decode_wav|cache] measures what
this module gains for the loaders, and its gate holds that it is not slower. Preflight already reads every header (``check_tf_readable``,
``check_npy``) to name unreadable files before training starts; what it learns is kept here as a
FileLayout: the file's bytes before its data, its size, where the data lies and in which byte order.

On every read the graph compares the file's first bytes and its size with the layout, byte for byte,
and decodes the data with ``tf.io.decode_raw`` only if both match; a file changed since preflight (a
new header, another size) is an error naming the file and what its header now says, never data read
with a stale layout. A change that keeps both header and size leaves the data where the layout says,
so what is decoded is the file's current data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from perfsuite._tensorflow import tensorflow

tf = tensorflow()


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


def layout_columns(layouts: list[FileLayout], prefix: str) -> dict[str, object]:
    """The layouts as columns for ``tf.data.Dataset.from_tensor_slices``, names under ``prefix``.

    Offsets and sizes are int64 columns, so the graph needs no casts of them.
    """
    def int64(values):
        return np.array(list(values), dtype=np.int64)

    columns = {
        f"{prefix}_head": [layout.head for layout in layouts],
        f"{prefix}_offset": int64(layout.data_offset for layout in layouts),
        f"{prefix}_size": int64(layout.file_size for layout in layouts),
        f"{prefix}_data_bytes": int64(layout.data_bytes for layout in layouts),
    }
    if any(layout.big_endian for layout in layouts):  # else the graph decodes little-endian only
        columns[f"{prefix}_big_endian"] = [layout.big_endian for layout in layouts]
    return columns


@tf.autograph.experimental.do_not_convert  # plain graph ops; nothing for autograph to rewrite
def decode_with_layouts(files, columns, *, what: str):
    """The data of each file as a flat tensor, after checking that every file still has its layout.

    ``files``: (raw bytes of the whole file, column prefix, dtype, path) for each file of one element;
    ``columns``: that element of ``layout_columns``; ``what`` names the kind of file in the error
    ("WAV", ".npy"). One assertion covers all the files (assertions cost more than comparisons); its
    message lists each file, whether it is unchanged, its sizes then and now and how a changed one starts.
    """
    start = tf.constant(0, tf.int64)
    ok, found = tf.constant(True), []
    for raw, prefix, _, path in files:
        size_now = tf.cast(tf.strings.length(raw), tf.int64)
        head = tf.strings.substr(raw, start, columns[f"{prefix}_offset"])
        unchanged = tf.equal(head, columns[f"{prefix}_head"]) & tf.equal(size_now, columns[f"{prefix}_size"])
        ok = ok & unchanged
        quoted = tf.where(unchanged, "", readable(tf.strings.substr(raw, start, _QUOTED_BYTES)))  # changed only
        found += [path, unchanged, columns[f"{prefix}_size"], size_now, quoted]
    checked = tf.debugging.Assert(ok, [
        (f"cannot read {what} file: expected the header and size it had when the loader was built; found "
        "(file, unchanged, size then, size now, start of a changed file)"), *found], summarize=_QUOTED_BYTES)
    with tf.control_dependencies([checked]):
        return [_decode(raw, columns, prefix, tf.as_dtype(dtype)) for raw, prefix, dtype, _ in files]


def _decode(raw, columns, prefix, dtype):
    offset, length = columns[f"{prefix}_offset"], columns[f"{prefix}_data_bytes"]
    big_endian = columns.get(f"{prefix}_big_endian")
    if big_endian is None:
        return tf.io.decode_raw(tf.strings.substr(raw, offset, length), dtype)
    return decode_in_order(raw, offset, length, dtype=dtype, big_endian=big_endian)


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
