"""The `.npy` readers: the TF-native decode_npy against np.load, and the header check check_npy.

decode_npy is traced once per (dtype, ndim) and then fed bytes, so hypothesis examples do not retrace.
The property everywhere: decode_npy returns exactly what np.load returns (dtype, shape, bytes), or
raises InvalidArgumentError naming the file; it never returns different data.
"""

from __future__ import annotations

import importlib.util
import io
import math
import sys
import tempfile
import tokenize
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite._tensorflow import tensorflow
from perfsuite.data.npy import (
    NP_LOAD_ATTEMPTS,
    SPURIOUS_AST_ERROR,
    accepted_descrs,
    check_npy,
    decode_npy,
    inspect_npy,
)
from perfsuite.data.npy import np_load as load_again  # this module's np_load is numpy's reading of bytes
from perfsuite.errors import DataError

tf = tensorflow()


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_spec = importlib.util.spec_from_file_location("make_npy_fixtures", FIXTURES / "make_npy_fixtures.py")
make_npy_fixtures = sys.modules.setdefault("make_npy_fixtures", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(make_npy_fixtures)  # registered first: its dataclasses look their module up
GOLDEN = make_npy_fixtures.golden()
MALFORMED = make_npy_fixtures.malformed()

DTYPES = ["i1", "u1", "i2", "i4", "i8", "f2", "f4", "f8", "b1", "u2", "c8", "c16"]
VERSIONS = [(1, 0), (2, 0), (3, 0)]
_DECODERS = {}


def decoder(dtype, ndim=None):
    """decode_npy for one dtype as a concrete function of (bytes, path): traced once, then reused."""
    native = np.dtype(dtype).newbyteorder("=")
    if (native, ndim) not in _DECODERS:
        _DECODERS[native, ndim] = tf.function(
            lambda raw, path: decode_npy(raw, dtype=tf.as_dtype(native), path=path, ndim=ndim),
            input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.string)],
        ).get_concrete_function()
    return _DECODERS[native, ndim]


def decode(content: bytes, dtype, path: str = "/data/x.npy", ndim=None) -> np.ndarray:
    return decoder(dtype, ndim)(tf.constant(content), tf.constant(path)).numpy()


def decode_error(content: bytes, dtype, path: str = "/data/x.npy", ndim=None) -> str:
    """The InvalidArgumentError message; fails the test if decoding succeeds."""
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        decode(content, dtype, path, ndim)
    message = error.value.message
    assert path in message, message
    return message


def assert_same_array(got: np.ndarray, expected: np.ndarray) -> None:
    """Same dtype (in native byte order), shape and bytes: NaN payloads and -0.0 included."""
    if expected.dtype.byteorder == ">":
        expected = expected.byteswap().view(expected.dtype.newbyteorder("<"))
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def written(array: np.ndarray, version) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


def np_load(content: bytes) -> np.ndarray | None:
    """np.load's reading, or None where numpy refuses the bytes."""
    try:
        return np.load(io.BytesIO(content), allow_pickle=False)
    except (ValueError, EOFError, OSError, tokenize.TokenError):  # TokenError: from numpy's header filter
        return None


def random_array(dtype: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Arbitrary bytes (NaNs, infinities, subnormals included); 0/1 bytes for bool."""
    count = math.prod(shape)
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=count).astype(bool).reshape(shape)
    return rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def on_disk(content: bytes, check):
    """Run ``check(path)`` on ``content`` written to a temporary file."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "a.npy"
        path.write_bytes(content)
        return check(path)


shapes = st.one_of(
    st.lists(st.integers(0, 3), max_size=8),  # 0-d up to 8-d, zero-size dims included
    st.lists(st.integers(0, 60), max_size=2),
).map(tuple)


# --- decode_npy == np.load, and check_npy agrees -----------------------------------------------------


@given(dtype=st.sampled_from(DTYPES), byteorder=st.sampled_from("<>"), shape=shapes, fortran=st.booleans(),
       version=st.sampled_from(VERSIONS), seed=st.integers(0, 2**32 - 1))
def test_decode_npy_equals_np_load_or_names_the_file(dtype, byteorder, shape, fortran, version, seed):
    array = random_array(np.dtype(dtype).newbyteorder(byteorder), shape, seed)
    if fortran:
        array = np.asfortranarray(array)  # (makes a 0-d array 1-d)
    content = written(array, version)
    path = f"/data/{dtype}{byteorder}-{'x'.join(map(str, array.shape))}.npy"
    fortran_order = on_disk(content, inspect_npy).fortran_order  # numpy writes it only when not also C order
    if fortran_order:  # refused, never transposed, never scrambled
        message = decode_error(content, dtype, path)
        assert "fortran_order" in message and "np.ascontiguousarray" in message
        with pytest.raises(DataError, match="fortran_order True"):
            on_disk(content, lambda p: check_npy(p, dtype=dtype))
    else:
        assert_same_array(decode(content, dtype, path), np.load(io.BytesIO(content)))
        header = on_disk(content, lambda p: check_npy(p, dtype=dtype, ndim=array.ndim))
        assert header.shape == array.shape and header.version == version


@given(written_dtype=st.sampled_from(DTYPES), read_dtype=st.sampled_from(DTYPES), shape=shapes,
       byteorder=st.sampled_from("<>"))
def test_another_dtype_is_refused_naming_what_was_found(written_dtype, read_dtype, shape, byteorder):
    written_as = np.dtype(written_dtype).newbyteorder(byteorder)
    if written_as.newbyteorder("=") == np.dtype(read_dtype):
        return  # the same dtype: covered above
    content = written(random_array(written_as, shape, seed=0), (1, 0))
    message = decode_error(content, read_dtype)
    assert written_as.str in message  # the header as found, e.g. {'descr': '<i4', ...}
    assert " or ".join(accepted_descrs(np.dtype(read_dtype))) in message  # what was expected
    with pytest.raises(DataError) as error:
        on_disk(content, lambda p: check_npy(p, dtype=read_dtype))
    assert repr(written_as.str) in error.value.found


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from(["<f4", ">i2", "|u1"]), position=st.floats(0, 1), byte=st.integers(0, 255),
       truncate=st.booleans())
def test_a_damaged_file_reads_as_np_load_reads_it_or_is_refused(shape, seed, dtype, position, byte, truncate):
    """One byte overwritten or the file cut short, anywhere: never data that differs from numpy's."""
    content = written(random_array(np.dtype(dtype), shape, seed), (1, 0))
    at = int(position * (len(content) - 1))
    damaged = content[:at] if truncate else content[:at] + bytes([byte]) + content[at + 1:]
    expected = np_load(damaged)
    try:
        got = decode(damaged, dtype)
    except tf.errors.InvalidArgumentError as error:
        assert "/data/x.npy" in error.message
        with pytest.raises(DataError):  # the preflight check refuses it too
            on_disk(damaged, lambda p: check_npy(p, dtype=dtype))
    else:
        assert expected is not None, "decode_npy read a file numpy refuses"
        assert_same_array(got, expected)
        on_disk(damaged, lambda p: check_npy(p, dtype=dtype))  # and the preflight check accepts it


@given(start=st.sampled_from([b"", b"\x93NUMPY\x01\x00", b"\x93NUMPY\x02\x00", b"\x93NUMPY\x03\x00"]),
       rest=st.binary(max_size=300), dtype=st.sampled_from(["f4", "u1"]))
def test_arbitrary_bytes_are_refused_with_the_named_error(start, rest, dtype):
    """Random bytes, also after a valid magic and version: the named error, no other exception."""
    message = decode_error(start + rest, dtype)
    assert "cannot read .npy file" in message and "expected" in message


# --- np_load: np.load, read again on CPython 3.11's spurious AST error ----------------------------------


def _failing_np_load(monkeypatch, failures: int, message: str = SPURIOUS_AST_ERROR + " (before=27, after=22)"):
    """np.load failing its first `failures` calls with SystemError(message); returns the list of calls."""
    calls, load = [], np.load

    def flaky(path, *args, **kwargs):
        calls.append(path)
        if len(calls) <= failures:
            raise SystemError(message)
        return load(path, *args, **kwargs)

    monkeypatch.setattr(np, "load", flaky)
    return calls


@pytest.mark.parametrize("failures", range(NP_LOAD_ATTEMPTS))
def test_np_load_reads_again_after_the_spurious_ast_error(monkeypatch, tmp_path, failures):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(6, dtype=np.float32).reshape(2, 3))
    calls = _failing_np_load(monkeypatch, failures)
    assert_same_array(load_again(path), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert len(calls) == failures + 1


def test_np_load_raises_the_spurious_error_after_its_attempts_and_any_other_at_once(monkeypatch, tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.zeros(3))
    calls = _failing_np_load(monkeypatch, NP_LOAD_ATTEMPTS)
    with pytest.raises(SystemError, match=SPURIOUS_AST_ERROR):
        load_again(path)
    assert len(calls) == NP_LOAD_ATTEMPTS
    monkeypatch.undo()
    calls = _failing_np_load(monkeypatch, 1, message="another interpreter error")
    with pytest.raises(SystemError, match="another"):
        load_again(path)
    assert len(calls) == 1


# --- fixtures ------------------------------------------------------------------------------------


def test_fixture_files_are_what_the_script_writes():
    expected = {name: case.content for name, case in {**GOLDEN, **MALFORMED}.items()}
    on_disk_now = {path.name: path.read_bytes() for path in (FIXTURES / "npy").iterdir()}
    assert on_disk_now == expected  # regenerate with: python fixtures/make_npy_fixtures.py


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_files_decode_exactly(name):
    path = FIXTURES / "npy" / name
    case = GOLDEN[name]
    reference = np.load(path)
    assert reference.dtype == case.array.dtype and reference.shape == case.array.shape
    assert reference.tobytes() == case.array.tobytes()
    assert_same_array(decode(path.read_bytes(), case.array.dtype, str(path)), reference)
    header = check_npy(path, dtype=case.array.dtype.newbyteorder("="), ndim=case.array.ndim)
    assert header == inspect_npy(path)
    assert header.shape == case.array.shape and not header.fortran_order
    assert header.descr == case.array.dtype.str
    assert header.data_offset == len(case.content) - case.array.nbytes
    assert header.as_dict()["path"] == str(path)


def skip_128_bytes(content: bytes, dtype, shape) -> np.ndarray | None:
    """The reader this project replaces: data at byte 128, C order. None where even that fails."""
    if len(content[128:]) % np.dtype(dtype).itemsize:
        return None
    data = np.frombuffer(content[128:], dtype=dtype)
    return data.reshape(shape) if data.size == math.prod(shape) else None


@pytest.mark.parametrize("name", ["f4_v1_align16.npy", "f4_v3_align16.npy", "f4_long_shape.npy",
                                  "fortran_order.npy"])
def test_a_fixed_128_byte_skip_would_fail_here(name):
    """Each of these files catches the fixed-skip bug: the skip returns other data, or nothing usable."""
    content = (FIXTURES / "npy" / name).read_bytes()
    reference = np.load(io.BytesIO(content))
    naive = skip_128_bytes(content, reference.dtype, reference.shape)
    assert naive is None or not np.array_equal(naive, reference)
    if reference.flags.f_contiguous and reference.ndim > 1:
        assert "fortran_order" in decode_error(content, reference.dtype)
    else:
        assert inspect_npy(FIXTURES / "npy" / name).data_offset != 128
        assert_same_array(decode(content, reference.dtype), reference)


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_files_are_refused_naming_the_file(name):
    path = FIXTURES / "npy" / name
    case = MALFORMED[name]
    message = decode_error(path.read_bytes(), case.dtype, str(path))
    assert case.phrase in message.lower() and "expected" in message
    with pytest.raises(DataError) as error:
        check_npy(path, dtype=case.dtype)
    assert error.value.path == str(path)
    assert case.phrase in str(error.value).lower() and error.value.expected and error.value.found


# --- in a tf.data pipeline, ranks, eager use -------------------------------------------------------


def test_decode_npy_in_a_tf_data_pipeline_with_a_static_rank():
    names = ["f4_v1.npy", "f4_v2.npy", "f4_v1_align16.npy", "f4_big_endian.npy", "f4_zero_frames.npy"]
    paths = [str(FIXTURES / "npy" / name) for name in names]
    dataset = tf.data.Dataset.from_tensor_slices(paths).map(
        lambda path: decode_npy(tf.io.read_file(path), dtype=tf.float32, path=path, ndim=2),
        num_parallel_calls=2, deterministic=True)
    assert dataset.element_spec.shape.rank == 2
    (batch,) = list(dataset.padded_batch(len(names)))
    for row, name in zip(batch.numpy(), names):
        array = GOLDEN[name].array
        np.testing.assert_array_equal(row[: array.shape[0], : array.shape[1]], array)
        assert not row[array.shape[0]:].any()  # padding only


def test_a_bad_file_in_a_tf_data_pipeline_names_the_file():
    paths = [str(FIXTURES / "npy" / "f4_v1.npy"), str(FIXTURES / "npy" / "fortran_order.npy")]
    dataset = tf.data.Dataset.from_tensor_slices(paths).map(
        lambda path: decode_npy(tf.io.read_file(path), dtype=tf.float32, path=path))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        list(dataset)
    assert paths[1] in error.value.message and "fortran_order" in error.value.message


def test_the_wrong_rank_is_refused():
    content = GOLDEN["f4_v1.npy"].content
    assert "3 dimensions" in decode_error(content, "f4", ndim=3)
    assert decode(content, "f4", ndim=2).shape == (7, 5)
    with pytest.raises(DataError, match="3 dimensions"):
        on_disk(content, lambda p: check_npy(p, dtype=np.float32, ndim=3))


def test_decode_npy_runs_eagerly():
    case = GOLDEN["i4_tokens.npy"]
    decoded = decode_npy(tf.constant(case.content), dtype=tf.int32, path="t.npy")
    np.testing.assert_array_equal(decoded, case.array)
    with pytest.raises(tf.errors.InvalidArgumentError, match="t.npy"):
        decode_npy(tf.constant(case.content), dtype=tf.float32, path="t.npy")


def test_unsupported_dtypes_are_refused_when_traced():
    with pytest.raises(ValueError, match="uint32"):
        decode_npy(tf.constant(b""), dtype=tf.uint32, path="x.npy")
    with pytest.raises(ValueError, match="plain numeric"):
        accepted_descrs(np.dtype([("a", "<f4")]))
    assert accepted_descrs(np.float32) == ("<f4", ">f4")
    assert accepted_descrs(np.uint8) == ("|u1", "<u1", ">u1")


def test_check_npy_names_a_missing_file(tmp_path):
    with pytest.raises(DataError) as error:
        check_npy(tmp_path / "absent.npy", dtype=np.float32)
    assert error.value.path == str(tmp_path / "absent.npy") and error.value.found == "no such file"
