"""Timing on tiny tf.data pipelines and steps: structure and clear orderings, never absolute speed."""

import itertools
import json
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite._tensorflow import tensorflow
from perfsuite.measure import timing
from perfsuite.measure.rounds import interleaved
from perfsuite.measure.step_model import measure_step

tf = tensorflow()


def _sleep_where(index, seconds, every=None, only=None):
    """A tf.data map function that sleeps in Python for selected element indices."""

    def sleep(i):
        if (every is not None and i % every == every - 1) or (only is not None and i == only):
            time.sleep(seconds)
        return i

    return tf.numpy_function(sleep, [index], tf.int64, stateful=True)


def _sequential(dataset):
    # No prefetch injected by tf.data: each batch's work happens inside the timed next().
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    return dataset.with_options(options)


# ------------------------------------------------------------------------------------- datasets


def test_measure_dataset_structure_and_rates():
    dataset = tf.data.Dataset.range(100).map(lambda i: {"x": tf.fill([3], i), "id": tf.strings.as_string(i)}).batch(4)
    result = timing.measure_dataset(dataset=dataset, warmup_batches=2, measure_batches=10, name="tiny")
    assert len(result.warmup_ns) == 2 and result.first_ns == result.warmup_ns[0]
    assert len(result.batch_ns) == 10 and result.batch_samples == (4,) * 10
    steady_s = sum(result.batch_ns) / 1e9
    assert result.samples_per_s == pytest.approx(40 / steady_s)
    assert result.batches_per_s == pytest.approx(10 / steady_s)
    assert result.summary.n == 10 and result.summary.min <= result.summary.p50 <= result.summary.max
    assert result.retraces is None
    assert any("only 10 values" in w for w in result.warnings)
    assert not result.cycle.significant and "too few points" in result.cycle.note
    assert timing.Measurement.from_dict(json.loads(json.dumps(result.as_dict(), allow_nan=False))) == result
    info = result.extra_info()
    json.dumps(info, allow_nan=False)  # extra_info must be plain JSON
    assert info["name"] == "tiny" and info["samples"] == 40 and len(info["batch_s"]) == 10
    assert info["batch_p95_s"] == result.summary.p95 and info["cycle_strength"] is None


def test_first_batch_is_reported_apart():
    dataset = _sequential(tf.data.Dataset.range(30).map(lambda i: _sleep_where(i, 0.3, only=0)).batch(1))
    result = timing.measure_dataset(dataset=dataset, warmup_batches=1, measure_batches=10)
    assert result.first_ns >= 0.3e9
    assert result.first_ns > max(result.batch_ns)


def test_periodic_sleep_in_the_pipeline_shows_in_per_batch_times():
    dataset = _sequential(tf.data.Dataset.range(100).map(lambda i: _sleep_where(i, 0.02, every=4)).batch(1))
    result = timing.measure_dataset(dataset=dataset, warmup_batches=4, measure_batches=40)
    # Element indices 3, 7, 11, ... sleep; measured batches start at index 4.
    slow = [ns for k, ns in enumerate(result.batch_ns) if (k + 4) % 4 == 3]
    fast = [ns for k, ns in enumerate(result.batch_ns) if (k + 4) % 4 != 3]
    assert len(slow) == 10 and min(slow) > np.median(fast)
    assert result.cycle.significant and result.cycle.period == 4
    assert any("periodic per-batch times" in w for w in result.warnings)


def test_dataset_too_short_says_how_many_batches_were_needed():
    with pytest.raises(ValueError, match=r"ended after 5 batches; expected at least 12 \(2 warm-up \+ 10 measured\)"):
        timing.measure_dataset(dataset=tf.data.Dataset.range(10).batch(2), warmup_batches=2, measure_batches=10)
    with pytest.raises(ValueError, match="warmup_batches: expected an integer >= 1, found 0"):
        timing.measure_dataset(dataset=[], warmup_batches=0, measure_batches=1)


def test_plain_iterables_and_custom_samples():
    batches = [np.zeros((8, 2), np.float32)] * 6
    result = timing.measure_dataset(dataset=batches, warmup_batches=1, measure_batches=5)
    assert result.batch_samples == (8,) * 5
    counted = timing.measure_dataset(dataset=batches, warmup_batches=1, measure_batches=5, samples_in=lambda b: 1)
    assert sum(counted.batch_samples) == 5
    with pytest.raises(ValueError, match="cannot infer the batch size"):
        timing.measure_dataset(dataset=[np.float32(1.0)] * 3, warmup_batches=1, measure_batches=1)


def _two_shapes():
    return [tf.ones([4, 3]) if k % 2 == 0 else tf.ones([4, 5]) for k in range(8)]


def test_retraces_of_a_tf_function_fed_two_shapes():
    @tf.function
    def step(x):
        return tf.reduce_sum(x * 2.0)

    result = measure_step(step=step, batches=_two_shapes(), warmup_calls=1, measure_calls=7)
    assert result.traces == 2
    assert result.retraces == 1  # the second shape first arrives in the measured window
    assert result.batch_samples == (4,) * 7
    assert result.first_ns > result.summary.median * 1e9  # tracing makes the first call the slowest


def test_static_signature_traces_once():
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
    def step(x):
        return tf.reduce_sum(x * 2.0)

    result = measure_step(step=step, batches=_two_shapes(), warmup_calls=1, measure_calls=7)
    assert result.traces == 1 and result.retraces == 0


def test_measure_step_with_fixed_batch_and_plain_function():
    calls = []

    def step(batch):
        calls.append(batch["x"].shape)
        return tf.reduce_sum(batch["x"])

    result = measure_step(step=step, batch={"x": tf.ones([6, 2])}, warmup_calls=2, measure_calls=3)
    assert len(calls) == 5 and len(result.warmup_ns) == 2 and len(result.batch_ns) == 3
    assert result.traces is None and result.retraces is None
    assert result.batch_samples == (6,) * 3


def test_a_round_of_a_warm_step_has_no_warm_up_and_no_first_call():
    calls = []
    result = measure_step(step=lambda batch: calls.append(1) or tf.reduce_sum(batch), batch=tf.ones([3, 2]),
                          warmup_calls=0, measure_calls=2)
    assert len(calls) == 2 and result.warmup_ns == () and result.first_ns is None and result.first_s is None
    with pytest.raises(ValueError, match="warmup_calls: expected an integer >= 0"):
        measure_step(step=tf.reduce_sum, batch=tf.ones([2]), warmup_calls=-1, measure_calls=1)


def test_measure_step_argument_errors():
    with pytest.raises(ValueError, match="exactly one of batches="):
        measure_step(step=tf.reduce_sum, warmup_calls=1, measure_calls=1)
    with pytest.raises(ValueError, match="exactly one of batches="):
        measure_step(step=tf.reduce_sum, batch=tf.ones([2]), batches=[tf.ones([2])],
                     warmup_calls=1, measure_calls=1)
    with pytest.raises(ValueError, match="return a tensor"):
        measure_step(step=lambda batch: None, batch=tf.ones([2]), warmup_calls=1, measure_calls=1)
    with pytest.raises(ValueError, match="ended after 2 batches"):
        measure_step(step=tf.reduce_sum, batches=[tf.ones([2])] * 2, warmup_calls=1, measure_calls=2)


def test_tracing_count():
    @tf.function
    def double(x):
        return x * 2

    start = timing.tracing_count(double)
    double(tf.constant(1.0))
    double(tf.constant(2.0))
    double(tf.constant([1.0, 2.0]))
    assert timing.tracing_count(double) - start == 2
    assert timing.tracing_count(lambda x: x) is None


def test_host_readback_and_leading_dim():
    batch = {"a": tf.ones([3, 2]), "b": tf.constant(["x", "y", "z"]), "c": np.zeros(3),
             "r": tf.ragged.constant([[1], [2, 3], []])}
    assert timing.host_readback(batch) == 5  # ragged: values + row splits
    assert timing.host_readback({"empty": tf.zeros([0, 4])}) == 1
    assert timing.leading_dim(batch) == 3
    with pytest.raises(ValueError, match="shape \\(\\)"):
        timing.leading_dim(tf.constant(1.0))


def _spy_force(monkeypatch):
    forced = []
    real = timing._force
    monkeypatch.setattr(timing, "_force", lambda tensor: (forced.append(tensor.dtype), real(tensor)))
    return forced


def _loader_like_batch():
    return {"id": tf.constant(["a", "b"]), "mel": tf.ones([2, 5, 3]), "tokens": tf.ones([2, 4], tf.int32),
            "r": tf.ragged.constant([[1], [2, 3]])}


def test_host_readback_reads_nothing_from_host_tensors_of_an_iterator(monkeypatch):
    forced = _spy_force(monkeypatch)
    batch = next(iter(tf.data.Dataset.from_tensors(_loader_like_batch()).repeat()))
    assert timing.host_readback(batch) == 5  # counted: they are complete
    assert forced == []  # neither the string id nor the mel was copied


def test_host_readback_forces_host_tensors_when_asked_or_asynchronous(monkeypatch):
    forced = _spy_force(monkeypatch)
    assert timing.host_readback(_loader_like_batch(), force_host=True) == 5
    assert len(forced) == 5 and tf.string in forced
    forced.clear()
    monkeypatch.setattr(tf.config.experimental, "get_synchronous_execution", lambda: False)
    assert timing.host_readback({"x": tf.ones([2, 2]) * 2.0}) == 1
    assert forced == [tf.float32]


def test_step_readback_forces_the_steps_output(monkeypatch):
    forced = _spy_force(monkeypatch)
    measure_step(step=tf.function(lambda x: tf.reduce_sum(x)), batch=tf.ones([4, 2]),
                 warmup_calls=1, measure_calls=2)
    assert forced == [tf.float32] * 3


def test_device_resident_tensors_are_forced_one_element_each(monkeypatch):
    forced = _spy_force(monkeypatch)
    monkeypatch.setattr(timing, "_on_host", lambda tensor: False)  # as if every tensor were on a GPU
    batch = {**_loader_like_batch(), "scalar": tf.constant(1.0), "empty": tf.zeros([0, 3])}
    assert timing.host_readback(batch) == 7
    assert len(forced) == 7


def test_force_copies_one_element_of_a_real_device_tensor():
    devices = tf.config.list_logical_devices("GPU")
    if not devices:
        pytest.skip("no GPU: device-resident readback needs one")
    with tf.device(devices[0].name):
        batch = {"mel": tf.ones([16, 400, 80]), "loss": tf.reduce_sum(tf.ones([8]))}
    assert "GPU" in batch["mel"].device and not timing._on_host(batch["mel"])
    assert timing.host_readback(batch) == 2


def test_null_pipeline_repeats_one_batch_of_the_same_structure():
    dataset = tf.data.Dataset.from_tensors(_loader_like_batch()).repeat()
    for source in (dataset, next(iter(dataset))):
        first, second = itertools.islice(timing.null_pipeline(source), 2)
        flat = [tf.nest.flatten(b, expand_composites=True) for b in (first, second)]
        assert [t.dtype for t in flat[0]] == [t.dtype for t in flat[1]] and len(flat[0]) == 5
        assert first["id"].numpy().tolist() == second["id"].numpy().tolist() == [b"a", b"b"]


def test_harness_overhead_is_small_next_to_a_slow_pipeline():
    batch = _loader_like_batch()
    overhead = timing.harness_overhead(batch, warmup_batches=2, measure_batches=40)
    assert 0 < overhead < 0.02  # tens of microseconds on a quiet machine; loose for a loaded one
    slow = _sequential(tf.data.Dataset.range(60).map(lambda i: _sleep_where(i, 0.02, every=1)).batch(1))
    measured = timing.measure_dataset(dataset=slow, warmup_batches=2, measure_batches=10)
    assert overhead < measured.summary.median
    counted = []
    timing.harness_overhead(batch, warmup_batches=1, measure_batches=3, readback=counted.append,
                            samples_in=lambda b: 2)
    assert len(counted) == 4  # the loop measure_dataset runs, with the readback given


# ------------------------------------------------------------------------------------------- A/B


def _ab(*, a, b, rounds, warmup_rounds=1) -> timing.ABResult:
    return timing.ab_result(*interleaved(timing.ab_runs(a, b), rounds=rounds, warmup_rounds=warmup_rounds))


def test_ab_rounds_alternate_order_and_report_the_speed_ratio():
    log = []

    def side(label, seconds):
        def run():
            log.append(label)
            time.sleep(seconds)
            return seconds

        return run

    result = _ab(a=side("A", 0.002), b=side("B", 0.004), rounds=4, warmup_rounds=1)
    assert "".join(log) == "AB" + "BA" + "AB" + "BA" + "AB"
    assert result.order == ("BA", "AB", "BA", "AB")
    assert result.unit == "s" and result.a_values == (0.002,) * 4
    assert result.ratios == pytest.approx((2.0,) * 4)  # B's time over A's: A is twice as fast
    assert result.summary.median == pytest.approx(2.0) and result.summary.n == 4
    assert result.as_dict()["ratio_median"] == pytest.approx(2.0)


def test_ab_rounds_of_two_pipelines():
    slow = _sequential(tf.data.Dataset.range(10**6).map(lambda i: _sleep_where(i, 0.002, every=1)).batch(1))
    fast = tf.data.Dataset.range(10**6).batch(1)
    slow_it, fast_it = iter(slow), iter(fast)

    def measure(iterator):
        return lambda: timing.measure_dataset(dataset=iterator, warmup_batches=1, measure_batches=5)

    result = _ab(a=measure(fast_it), b=measure(slow_it), rounds=3)
    assert result.unit == "samples/s"
    assert all(r > 1 for r in result.ratios)  # A (no sleep) delivers more samples per second
    assert result.summary.low <= result.summary.median <= result.summary.high


def test_ab_rounds_reject_mixed_values():
    with pytest.raises(TypeError, match="same kind of value"):
        _ab(a=lambda: 1.0, b=lambda: timing.measure_dataset(
            dataset=[np.zeros((1, 1))] * 3, warmup_batches=1, measure_batches=2), rounds=1, warmup_rounds=0)
    with pytest.raises(TypeError, match="seconds \\(float\\) or a Measurement"):
        _ab(a=lambda: "fast", b=lambda: 1.0, rounds=1)


def test_min_seconds_extends_a_short_measurement_in_whole_chunks():
    def batches():
        while True:
            time.sleep(0.002)
            yield np.zeros((4, 1))

    plain = timing.measure_dataset(dataset=batches(), warmup_batches=1, measure_batches=3)
    extended = timing.measure_dataset(dataset=batches(), warmup_batches=1, measure_batches=3, min_seconds=0.03)
    capped = timing.measure_dataset(dataset=batches(), warmup_batches=1, measure_batches=1, min_seconds=60)
    assert len(plain.batch_ns) == 3
    assert sum(extended.batch_ns) >= 0.03e9 and len(extended.batch_ns) % 3 == 0
    assert len(extended.batch_ns) <= 3 * (0.03 / 0.002 + 1)  # stops once the time is reached
    assert len(capped.batch_ns) == timing.MAX_EXTENSION
    assert extended.samples_per_s > 0 and sum(extended.batch_samples) == 4 * len(extended.batch_ns)


_PLAIN = st.recursive(st.integers(0, 3).map(lambda n: np.zeros((n + 1, 2))) | st.text(max_size=3),
                      lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
                      | st.dictionaries(st.text("abc", min_size=1, max_size=2), inner, max_size=3), max_leaves=8)


@given(_PLAIN)
def test_plain_structures_flatten_in_tf_nest_order(structure):
    # Without TensorFlow imported, batches are flattened by hand: the order must be tf.nest's.
    ours, theirs = timing._flatten_plain(structure), tf.nest.flatten(structure)
    assert len(ours) == len(theirs) and all(a is b for a, b in zip(ours, theirs))
