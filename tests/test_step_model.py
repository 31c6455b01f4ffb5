"""The step model (measure/step_model.py): the first call timed apart, one timer whose readback forces
completion inside the timed window, retraces counted; invariants only, never speed."""

import itertools
import time
from types import SimpleNamespace

import numpy as np
import pytest

from perfsuite._tensorflow import tensorflow
from perfsuite.errors import PerfsuiteError
from perfsuite.measure import step_model, timing
from perfsuite.measure.step_model import StepError, StepModel, measure_step

tf = tensorflow()

SLEEP_S = 0.05


class _Clock:
    """A planted clock for step_model: only what the test advances moves it."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        monkeypatch.setattr(step_model, "time", SimpleNamespace(perf_counter_ns=lambda: int(self.now * 1e9)))

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_the_first_call_is_reported_apart_from_the_steady_call(monkeypatch):
    clock, called = _Clock(monkeypatch), []

    def step(batch):
        clock.advance(10.0 if not called else 1.0)  # the first call traces and compiles
        called.append(batch)
        return tf.constant(1.0)

    first = StepModel(step).first_calls(tf.constant(2.0))
    assert (first.first_s, first.steady_s) == (10.0, 1.0)
    assert len(called) == 2
    assert first.traces is None  # a plain callable: its traces cannot be counted


def test_calls_time_the_fetch_apart_and_leave_the_warm_up_untimed(monkeypatch):
    clock = _Clock(monkeypatch)

    def batches():
        for index in itertools.count():
            clock.advance(0.5)
            yield tf.constant(float(index))

    def step(batch):
        clock.advance(1.0)
        return batch

    model = StepModel(step)
    calls = model.calls(batches(), count=2, warmup=3)
    assert (calls.count, calls.seconds, calls.fetch_s) == (2, 3.0, 1.0)
    assert (calls.per_call_s, calls.fetch_per_call_s, calls.per_s) == (1.5, 0.5, 2 / 3)
    more = model.calls(batches(), count=1, at_least_s=5.0)  # 1.5 s a call: four calls last 5 s or more
    assert (more.count, more.seconds) == (4, 6.0)


def test_the_timer_waits_for_the_steps_own_work():
    def sleep(x):
        time.sleep(SLEEP_S)
        return x

    @tf.function
    def step(batch):
        return tf.reduce_sum(tf.py_function(sleep, [batch], tf.float32))

    model = StepModel(step)
    first = model.first_calls(tf.ones([4]))
    assert first.first_s >= SLEEP_S and first.steady_s >= SLEEP_S
    assert model.call_s(tf.ones([4])) >= SLEEP_S
    assert model.calls(itertools.repeat(tf.ones([4])), count=3).per_call_s >= SLEEP_S


def test_the_readback_forces_every_output_leaf_inside_the_timed_window(monkeypatch):
    """Each forced tensor sleeps: a call times at least one sleep per leaf, host tensors included."""
    forced, real = [], timing._force

    def slow_force(tensor):
        time.sleep(SLEEP_S)
        forced.append(tensor.dtype)
        real(tensor)

    monkeypatch.setattr(timing, "_force", slow_force)
    model = StepModel(lambda batch: {"loss": tf.reduce_sum(batch), "grads": (batch * 2, tf.cast(batch, tf.int32))})
    seconds = model.call_s(tf.ones([3]))
    assert len(forced) == 3 and seconds >= 3 * SLEEP_S


def test_retraces_are_counted_for_a_tf_function_and_none_for_a_plain_callable():
    def traced():
        return tf.function(lambda batch: tf.reduce_sum(batch))

    same = StepModel(traced())
    assert same.first_calls(tf.ones([2])).traces == 1
    same.call_s(tf.zeros([2]))
    assert (same.traces, same.retraces) == (1, 0)

    other = StepModel(traced())
    other.first_calls(tf.ones([2]))
    other.call_s(tf.ones([3]))  # a new shape: a second trace
    assert (other.traces, other.retraces) == (2, 1)

    plain = StepModel(lambda batch: tf.reduce_sum(batch))
    plain.call_s(tf.ones([2]))
    plain.call_s(tf.ones([3]))
    assert (plain.traces, plain.retraces) == (None, None)


def test_a_step_that_raises_is_named_in_one_line():
    def broken(batch):
        return batch / 0

    with pytest.raises(StepError) as raised:
        StepModel(broken, name="--step user:broken").call_s(1)
    message = str(raised.value)
    assert message == ("--step user:broken: expected step(batch) to run on the pipeline's batches, found "
                       "ZeroDivisionError: division by zero")
    assert isinstance(raised.value, PerfsuiteError) and isinstance(raised.value, ValueError)
    assert isinstance(raised.value.__cause__, ZeroDivisionError)


def test_a_step_that_returns_no_tensor_is_named():
    with pytest.raises(StepError, match="^--step user:nothing: expected step\\(batch\\) to return a tensor "
                                        "\\(e.g. the loss\\) to wait for, found NoneType$"):
        StepModel(lambda batch: None, name="--step user:nothing").first_calls(tf.ones([2]))


def test_a_readback_given_replaces_the_default():
    seen = []
    model = StepModel(lambda batch: None, readback=seen.append)
    model.calls(iter([1, 2]), count=2)
    assert seen == [None, None]


def test_measure_step_times_each_call_through_the_model():
    # The fixture's measure_step is the StepModel's, call by call: its errors name the step, retraces count
    # from the end of its warm-up.
    with pytest.raises(StepError, match="^benchmark step: expected step\\(batch\\) to run on"):
        measure_step(step=lambda batch: batch / 0, batch=np.ones((2, 1)), warmup_calls=1, measure_calls=1,
                     name="benchmark step")
    step = tf.function(lambda batch: tf.reduce_sum(batch))
    result = measure_step(step=step, batches=[tf.ones([2]), tf.ones([2]), tf.ones([3])], warmup_calls=1,
                          measure_calls=2)
    assert (result.traces, result.retraces, result.batch_samples) == (2, 1, (2, 3))
