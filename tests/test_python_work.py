"""The work of Python bodies (perfsuite.measure.python_work): numpy ufuncs, operators and array functions
counted by element and dtype, a refactor that adds no work counted the same, what cannot be counted named
with its call count, from_generator bodies counted, the same counts on every run and thread. No timing."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from perfsuite._tensorflow import tensorflow
from perfsuite.data import audio
from perfsuite.data.audio import MelConfig
from perfsuite.measure.python_work import PythonCounts, count_python
from perfsuite.measure.work import dataset_work
from perfsuite.verdict.work import compare_work

tf = tensorflow()
MEL = MelConfig()
CLIPS = [np.random.default_rng(n).uniform(-0.5, 0.5, n).astype(np.float32) for n in (5_000, 7_000, 9_000)]


def _mel(samples, dtype=np.float64, extra_pass=False):
    """The numpy log-mel of perfsuite.data.audio.log_mel_numpy, in ``dtype``, with one more ufunc pass."""
    padded = np.zeros(MEL.padded_length(samples.shape[0]), dtype=dtype)
    padded[: samples.shape[0]] = samples
    windows = np.lib.stride_tricks.sliding_window_view(padded, MEL.win_length)[:: MEL.hop_length]
    spectrum = np.fft.rfft(windows * audio.hann_window(MEL).astype(dtype), n=MEL.n_fft, axis=1)
    magnitude = np.abs(spectrum)
    if extra_pass:
        magnitude = magnitude * 1.0
    mel = magnitude @ audio.mel_filterbank(MEL).astype(dtype)
    return np.log(np.maximum(mel, MEL.log_floor)).astype(np.float32)


def _mel_refactored(samples, dtype=np.float64, extra_pass=False):
    """The same work as _mel: renamed locals, one expression split in two, one joined."""
    length = samples.shape[0]
    signal = np.zeros(MEL.padded_length(length), dtype=dtype)
    signal[:length] = samples
    frames = np.lib.stride_tricks.sliding_window_view(signal, MEL.win_length)[:: MEL.hop_length]
    window = audio.hann_window(MEL).astype(dtype)
    windowed = frames * window
    bins = np.fft.rfft(windowed, n=MEL.n_fft, axis=1)
    energies = np.abs(bins) @ audio.mel_filterbank(MEL).astype(dtype)
    floored = np.maximum(energies, MEL.log_floor)
    return np.log(floored).astype(np.float32)


def _count(body, clips=CLIPS) -> PythonCounts:
    counts = PythonCounts()
    for clip in clips:
        count_python(body, [clip], counts)
    return counts


def test_one_more_ufunc_pass_over_the_mel_spectrum_changes_the_count():
    base, more = _count(lambda a: _mel(a)), _count(lambda a: _mel(a, extra_pass=True))
    assert more.calls["ufunc:multiply:float64"] == base.calls["ufunc:multiply:float64"] + len(CLIPS)
    frames_bins = sum(MEL.num_frames(len(c)) * MEL.n_bins for c in CLIPS)
    assert more.work - base.work == 2 * frames_bins  # its input and its output, per element


def test_the_mel_in_float32_instead_of_float64_moves_the_keys():
    double, single = _count(lambda a: _mel(a)), _count(lambda a: _mel(a, dtype=np.float32))
    assert "ufunc:log:float64" in double.calls and "ufunc:log:float32" in single.calls
    assert "func:numpy.fft.rfft:complex128" in double.calls and "func:numpy.fft.rfft:complex64" in single.calls
    assert set(double.calls) != set(single.calls)


def test_a_refactor_that_adds_no_work_counts_the_same():
    base, refactored = _count(lambda a: _mel(a)), _count(lambda a: _mel_refactored(a))
    assert base.work > 0 and base.calls["ufunc:matmul:float64"] == len(CLIPS)
    assert (refactored.calls, refactored.work) == (base.calls, base.work)

    def joined(a, b, c):
        return a * b + c

    def split(first, second, third):
        product = first * second
        return product + third

    arrays = [np.ones(100, np.float32), np.ones(100, np.float32), np.ones(100, np.float32)]
    one, two = PythonCounts(), PythonCounts()
    count_python(joined, arrays, one)
    count_python(split, arrays, two)
    assert dict(one.calls) == dict(two.calls) == {"ufunc:multiply:float32": 1, "ufunc:add:float32": 1}
    assert one.work == two.work == 600


def test_np_dot_counts_its_inputs_once_and_its_output():
    counts = PythonCounts()
    count_python(lambda a, b: np.dot(a, b), [np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)], counts)
    assert dict(counts.calls) == {"func:numpy.dot:float32": 1} and counts.work == 3 * 4 + 4 * 5 + 3 * 5


def test_a_call_into_a_library_that_cannot_be_counted_is_named_with_its_call_count():
    signal = pytest.importorskip("scipy.signal")

    def body(a):
        first = signal.get_window("hann", a.shape[0])
        second = signal.get_window("hamming", a.shape[0])
        return a * first * second

    counts = PythonCounts()
    count_python(body, [np.ones(64)], counts)
    named = {k: v for k, v in counts.calls.items() if k.startswith("uncounted:")}
    assert list(named.values()) == [2] and next(iter(named)).endswith(".get_window"), counts.calls
    assert counts.calls["new:float64"] == 2 and counts.calls["ufunc:multiply:float64"] == 2


def test_a_cython_function_the_hooks_cannot_see_is_named_by_the_line_that_calls_it():
    sosfilt = pytest.importorskip("scipy.signal._sosfilt")

    def body(x):
        filtered = x.copy()
        for _ in range(3):
            sosfilt._sosfilt(np.array([[1.0, 0, 0, 1, 0, 0]]), filtered, np.zeros((1, 1, 2)))  # in place
        return filtered

    counts = PythonCounts()
    count_python(body, [np.ones((1, 16))], counts)
    assert counts.calls["uncounted:scipy.signal._sosfilt._sosfilt"] == 3, counts.calls


def test_a_jitted_function_is_named_not_a_silent_zero():
    numba = pytest.importorskip("numba")
    double = numba.njit(lambda x: x * 2.0)

    def body(a):
        first = double(a)
        second = double(a)
        return first + second  # its results reach the body's locals: counted from there

    counts = PythonCounts()
    count_python(body, [np.ones(10)], counts)
    assert counts.calls["uncounted:numba"] == 2 and counts.calls["new:float64"] == 2
    assert counts.calls["ufunc:add:float64"] == 1


def test_the_same_body_counts_the_same_twice_and_on_another_thread():
    config = MelConfig(n_mels=41)  # a filterbank no other test has cached: the first count warms it

    def body(a):
        return audio.log_mel_numpy(a, config)

    first, again, threaded = _count(body), _count(body), {}
    worker = threading.Thread(target=lambda: threaded.update(counts=_count(body)))
    worker.start()
    worker.join()
    assert first.work > 0 and "ufunc:matmul:float64" in first.calls
    assert (again.calls, again.work) == (first.calls, first.work)
    assert (threaded["counts"].calls, threaded["counts"].work) == (first.calls, first.work)


def test_the_numpy_function_loaders_mel_is_counted_pass_by_pass(tiny_corpus, tiny_cache):
    from perfsuite.data import loaders

    config = loaders.LoaderConfig(kind="numpy_function", source="wav", batch_size=4)
    dataset = loaders.build_loader(dataset_dir=tiny_corpus, cache_dir=tiny_cache, config=config).dataset
    fingerprint = dataset_work(dataset, name="numpy_function-wav").snapshot()
    calls = fingerprint["python_calls"]
    assert fingerprint["work"]["python_work_per_sample"] > 0
    for key in ("ufunc:multiply:float64", "ufunc:absolute:float64", "ufunc:matmul:float64", "ufunc:log:float64",
                "func:numpy.fft.rfft:complex128", "method:astype:float32"):
        assert calls.get(key, 0) >= 8, (key, calls)  # each of the 8 reference elements
    assert not [k for k in calls if k.startswith("uncounted:")], calls


def _generated(extra=0.0):
    def generate():
        for clip in CLIPS:
            if extra:
                _mel(clip[: int(len(clip) * extra)])
            yield _mel(clip)

    dataset = tf.data.Dataset.from_generator(generate, output_signature=tf.TensorSpec([None, MEL.n_mels], tf.float32))
    return dataset_work(dataset.padded_batch(2), name="generated").snapshot()


def test_five_percent_more_work_in_a_from_generator_body_fails():
    base = _generated()
    assert base["work"]["python_work_per_sample"] > 0 and base["python_calls"]["ufunc:log:float64"] == len(CLIPS)
    assert not compare_work(_generated(), base).failed
    verdict = compare_work(_generated(extra=0.05), base)
    assert verdict.failed and any("Python work per sample" in c for c in verdict.changes), verdict.changes
