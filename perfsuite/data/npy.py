"""Reading `.npy` files: a TF-native parser for the input pipeline and a header check for preflight.

The parser reads the real header, as numpy writes it (numpy.lib.format):

    bytes 0-5   magic b"\\x93NUMPY"
    bytes 6-7   format version: 1.0, 2.0 or 3.0
    version 1:  bytes 8-9 header length (little-endian uint16), header text from byte 10
    version 2/3: bytes 8-11 header length (little-endian uint32), header text from byte 12
    header      "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 80), }" padded with spaces, "\\n"
    data        prod(shape) * itemsize bytes, C order, byte order given by descr

The header is 128 bytes for most arrays numpy writes today, but not for long shapes, other writers or
older numpy releases (16-byte alignment), so nothing here assumes a fixed data offset.

Only C-order arrays of the caller's dtype are decoded, in either byte order. Fortran order is
rejected rather than transposed: a reader that ignored it returned scrambled mels in the project this
suite is modelled on. Every other surprise (bad magic, unknown version, another dtype, structured or
object dtypes, a malformed header, a data size that does not match the shape) is an error naming the
file, what was expected and what was found; the parser never returns data it is not sure of.
"""

from __future__ import annotations

import ast
import math
import os
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from perfsuite._tensorflow import tensorflow
from perfsuite.data.layout import decode_in_order, readable
from perfsuite.errors import DataError
from perfsuite.records import Record

tf = tensorflow()


MAGIC = b"\x93NUMPY"
SUPPORTED_VERSIONS = ((1, 0), (2, 0), (3, 0))

# decode_raw's output types that have a plain numpy equivalent (no uint32/uint64, no bfloat16).
_NUMPY_DTYPES = {
    dtype: np.dtype(dtype.as_numpy_dtype)
    for dtype in (tf.bool, tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32, tf.int64,
                  tf.float16, tf.float32, tf.float64, tf.complex64, tf.complex128)
}

# The header as numpy writes it: a dict of exactly these three keys in this (sorted) order, which every
# numpy release and the common C/C++/Rust writers use. Deliberately narrower than the Python literal
# numpy evaluates (no leading zeros, comments or other key orders), so that what it accepts numpy reads
# the same way. A structured dtype's descr is a list and does not match. The same text is an RE2 pattern
# (TF) and a Python one: only [ \t\n], [0-9] and literals. Groups: 1 descr, 2 fortran_order, 3 shape.
_DIM = r"(?:0|[1-9][0-9]{0,17})"  # at most 18 digits: any count of that size fits an int64
_WS = r"[ \t\n]*"
MAX_HEADER_BYTES = 10000  # numpy's default max_header_size: longer headers np.load refuses


def header_pattern(*, descr: str = r"[^']*", fortran_order: str = "True|False") -> str:
    """Pattern of a whole header; ``descr`` and ``fortran_order`` narrow what it accepts."""
    w = _WS
    shape = rf"\({w}((?:{_DIM}{w},(?:{w}{_DIM}{w},)*(?:{w}{_DIM})?{w})?)\)"
    return (rf"\{{{w}'descr'{w}:{w}'({descr})'{w},{w}'fortran_order'{w}:{w}({fortran_order}){w},"
            rf"{w}'shape'{w}:{w}{shape}{w},?{w}\}}{w}")


HEADER_PATTERN = header_pattern()


def accepted_descrs(dtype: np.dtype) -> tuple[str, ...]:
    """The header descr strings that hold ``dtype``: little- and big-endian, and '|' for 1-byte types.

    '=' (native order) is refused: in a file it does not say which machine's order was meant.
    """
    dtype = np.dtype(dtype)
    if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biufc":
        raise ValueError(f"expected a plain numeric or bool dtype, found {dtype!r}")
    code = dtype.str[1:]  # kind and size, e.g. "f4"
    descrs = ("<" + code, ">" + code)
    return ("|" + code, *descrs) if dtype.itemsize == 1 else descrs


# --------------------------------------------------------------------------------------------------
# TF-native parser
#
# Speed: inside a tf.data map function every op costs about a microsecond (a string op a few), and a
# tf.cond or a second assertion more than a handful of ops; so the parser is one branch-free run of
# ops with one assertion, and does its string work once: one regex both vets magic, version and header
# (for this dtype, C order) and extracts descr and shape. None of the ops can fail whatever the bytes
# (the header length is masked, offsets clipped, the shape parsed only from vetted text), so the
# assertion always reports the first problem, and the data is decoded only after it held. Big-endian
# data is decoded by a second decode_raw whose input is empty for little-endian files.

# Bytes 0-7 (magic and version) read as one little-endian int64, for versions 1.0, 2.0 and 3.0.
_PREFIX_WORDS = tuple(int.from_bytes(MAGIC + bytes([major, 0]), "little") for major in (1, 2, 3))
# The bytes before the header as an RE2 pattern: the magic's first byte (0x93, not UTF-8) is any byte
# here and is checked with the version words; then the version and 2 or 4 length bytes.
_PREFIX_PATTERN = r"\CNUMPY(?:\x01\x00\C\C|[\x02\x03]\x00\C\C\C\C)"


@tf.autograph.experimental.do_not_convert  # plain graph ops; nothing for autograph to rewrite
def decode_npy(raw, *, dtype, path, ndim: int | None = None):
    """Decode the bytes of a whole `.npy` file (a scalar tf.string) into a tensor of ``dtype``.

    Graph ops only, so it runs inside ``tf.data`` map functions without the GIL. ``path`` (str or
    scalar UTF-8 string tensor) only names the file in error messages. ``ndim``, when given, is checked
    and becomes the static rank of the result (``padded_batch`` needs a known rank).

    Raises tf.errors.InvalidArgumentError at run time for anything but a C-order array of ``dtype``
    (either byte order) with a well-formed version 1.0/2.0/3.0 header and exactly the data its shape needs.
    """
    dtype = tf.as_dtype(dtype)
    if dtype not in _NUMPY_DTYPES:
        raise ValueError(f"decode_npy: expected dtype one of {sorted(d.name for d in _NUMPY_DTYPES)}, "
                         f"found {dtype.name}")
    np_dtype = _NUMPY_DTYPES[dtype]
    descrs = accepted_descrs(np_dtype)
    raw = tf.convert_to_tensor(raw, tf.string)
    path = tf.convert_to_tensor(path, tf.string)

    file_size = tf.strings.length(raw)
    size = tf.cast(file_size, tf.int64)
    prefix, length_word = tf.unstack(tf.io.decode_raw(raw, tf.int64, fixed_length=16), num=2)  # zero-padded
    is_v1 = tf.equal(prefix, _PREFIX_WORDS[0])
    header_start = tf.where(is_v1, tf.constant(10, tf.int64), 12)
    length_mask = tf.where(is_v1, tf.constant(0xFFFF, tf.int64), 0xFFFFFFFF)  # v1: a 2-byte length
    header_len = tf.bitwise.bitwise_and(length_word, length_mask)
    data_offset = header_start + header_len
    data_bytes = size - data_offset
    version_ok = tf.reduce_any(tf.equal(prefix, _PREFIX_WORDS))
    # The file up to its data: magic, version, length and header (16 bytes if the version is wrong; never
    # much more than numpy's header limit, so that a bad length cannot send the regex through the data).
    head = tf.strings.substr(raw, tf.constant(0, tf.int64), tf.where(
        version_ok, tf.minimum(data_offset, header_start + MAX_HEADER_BYTES + 1), 16))  # clipped at the end

    # "<f4 3, 80," for a good file start; " " for any other (both groups empty). \C: any byte, non-UTF-8 too.
    good_header = header_pattern(descr="|".join(re.escape(descr) for descr in descrs), fortran_order="False")
    parsed = tf.strings.regex_replace(head, rf"^(?:{_PREFIX_PATTERN}{good_header}|\C*)$", r"\1 \3",
                                      replace_global=False)
    # Raw StringSplitV2 on whitespace (empty pieces dropped): tf.strings.split would add some 25 ops.
    words = tf.raw_ops.StringSplitV2(input=tf.reshape(tf.strings.regex_replace(parsed, ",", " "), [1]),
                                     sep="").values  # ["<f4", "3", "80"], or [] for a bad header
    dims = tf.strings.to_number(words[1:], tf.int64)

    checks = [  # (holds, what was expected), in the order a reader meets them
        (version_ok, "the .npy magic (byte 0x93, then NUMPY) and format version 1.0, 2.0 or 3.0"),
        ((tf.size(words) > 0) & (header_len <= MAX_HEADER_BYTES),
         (f"a header {{descr: {' or '.join(descrs)} ({np_dtype.name}), fortran_order: False, shape: (ints,)}} "
         f"as numpy writes it, at most {MAX_HEADER_BYTES} bytes (a Fortran-order array: re-save it with "
         "np.ascontiguousarray)")),
        (_size_matches(dims, np_dtype.itemsize, data_bytes),
         f"prod(shape) * {np_dtype.itemsize} data bytes after the header"),
    ]
    if ndim is not None:
        checks.append((tf.equal(tf.size(dims), ndim), f"{ndim} dimensions in shape"))
    # One assertion, its message the first failed expectation: asserts cost more than selects.
    ok, reason = checks[-1][0], tf.constant(f"expected {checks[-1][1]}; found (file size, file start)")
    for holds, expected in reversed(checks[:-1]):
        ok = holds & ok
        reason = tf.where(holds, reason, f"expected {expected}; found (file size, file start)")
    checked = tf.debugging.Assert(ok, ["cannot read .npy file", path, reason, file_size, readable(head)])

    with tf.control_dependencies([checked]):
        values = decode_in_order(raw, data_offset, data_bytes, dtype=dtype,
                                big_endian=tf.reduce_any(tf.equal(words, descrs[-1])))  # '>f4' etc.
    array = tf.reshape(values, dims)
    if ndim is not None:
        array.set_shape([None] * ndim)
    return array


def _size_matches(dims, itemsize, data_bytes):
    # Counted in float64 so that an absurd shape cannot wrap around to a plausible byte count.
    expected_bytes = tf.reduce_prod(tf.cast(dims, tf.float64)) * itemsize
    return tf.equal(expected_bytes, tf.cast(data_bytes, tf.float64))


# --------------------------------------------------------------------------------------------------
# Python side: header only, for preflight (perfsuite check-data) and the loaders' record building


@dataclass(frozen=True)
class NpyHeader(Record):
    """What a `.npy` header says. ``descr`` is as written ('<f4', '>i2', '|u1', or a structured list)."""

    path: str
    version: tuple[int, int]
    descr: str
    fortran_order: bool
    shape: tuple[int, ...]
    data_offset: int

    @property
    def dtype(self) -> np.dtype:
        return npy_format.descr_to_dtype(ast.literal_eval(self.descr) if self.descr.startswith("[")
                                            else self.descr)

    @property
    def data_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


# CPython 3.11's AST constructor keeps one recursion count per interpreter, not per thread: np.load's header
# parse (ast.literal_eval) on two threads at once can fail though it parsed right. Reads again, at most this
# many times in all (measured: scripts/measure_npy_thread_race.py).
SPURIOUS_AST_ERROR = "AST constructor recursion depth mismatch"
NP_LOAD_ATTEMPTS = 3


def np_load(path) -> np.ndarray:
    """np.load(path), read again when CPython 3.11 raises its spurious AST SystemError (see
    SPURIOUS_AST_ERROR): what tf.numpy_function's parallel calls need. Any other error is raised as it is."""
    for attempt in range(1, NP_LOAD_ATTEMPTS + 1):
        try:
            return np.load(path)
        except SystemError as error:
            if SPURIOUS_AST_ERROR not in str(error) or attempt == NP_LOAD_ATTEMPTS:
                raise


def inspect_npy(path) -> NpyHeader:
    """Read a `.npy` header with numpy.lib.format; raise DataError if it is not one numpy can read."""
    return _read_header(path)[0]


def check_npy(path, *, dtype, ndim: int | None = None) -> NpyHeader:
    """Check that decode_npy(dtype=...) will read ``path``: the same rules, from the header and file size.

    Raises DataError naming the file, the expectation and what was found.
    """
    header, header_text = _read_header(path)
    dtype = np.dtype(dtype)
    descrs = accepted_descrs(dtype)
    if header.descr not in descrs:
        raise DataError(header.path, expected=f"descr {' or '.join(map(repr, descrs))} ({dtype.name})",
                        found=f"descr {header.descr!r}")
    if header.fortran_order:
        raise DataError(header.path, found="fortran_order True",
                        expected="fortran_order False (C order); re-save with np.ascontiguousarray")
    if ndim is not None and len(header.shape) != ndim:
        raise DataError(header.path, expected=f"{ndim} dimensions", found=f"shape {header.shape}")
    if not re.fullmatch(HEADER_PATTERN, header_text):
        raise DataError(header.path, expected="a header written as numpy writes it: {'descr': ..., "
                        "'fortran_order': ..., 'shape': (...), } in that order, plain integers",
                        found=f"header {header_text!r}")
    file_size = Path(path).stat().st_size
    if file_size != header.data_offset + header.data_bytes:
        raise DataError(header.path,
                        expected=f"{header.data_offset} header bytes + {header.data_bytes} data bytes for "
                                 f"shape {header.shape} = {header.data_offset + header.data_bytes} bytes",
                        found=f"{file_size} bytes")
    return header


def _read_header(path) -> tuple[NpyHeader, str]:
    """The header as numpy parses it, and its text."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as file:
            version = npy_format.read_magic(file)
            if version not in SUPPORTED_VERSIONS:
                raise DataError(path, expected="format version 1.0, 2.0 or 3.0",
                                found=f"version {version[0]}.{version[1]}")
            header_start = file.tell() + (2 if version == (1, 0) else 4)
            # read_array_header_2_0 also reads 3.0 headers: the same layout; only non-ASCII text (field
            # names of structured dtypes, refused anyway) is decoded differently.
            read = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
            shape, fortran_order, _ = read(file, max_header_size=MAX_HEADER_BYTES)
            data_offset = file.tell()
            file.seek(header_start)
            encoding = "utf8" if version == (3, 0) else "latin1"
            header_text = file.read(data_offset - header_start).decode(encoding)
    except FileNotFoundError:
        raise DataError(path, expected="an existing .npy file", found="no such file") from None
    except DataError:
        raise
    # numpy raises ValueError (bad magic, short file, bad header) or, from its header tokenizer, TokenError.
    except (ValueError, OSError, tokenize.TokenError) as error:
        raise DataError(path, expected="a .npy file numpy can read", found=str(error)) from error
    try:
        descr = ast.literal_eval(header_text)["descr"]  # numpy has just parsed the same text as this dict
    except (SyntaxError, ValueError):  # only numpy's Python 2 filter ("3L") made it readable
        raise DataError(path, expected="a header that is a Python 3 literal",
                        found=repr(header_text)) from None
    header = NpyHeader(path=path, version=version, descr=descr if isinstance(descr, str) else repr(descr),
                       fortran_order=bool(fortran_order), shape=tuple(int(d) for d in shape),
                       data_offset=data_offset)
    return header, header_text
