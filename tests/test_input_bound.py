"""The one input-bound measurement: the step fed by the pipeline and by its synthetic twin, in rounds.

Tiny tf.data pipelines on the CPU; a slow pipeline sleeps in Python per element, a slow step sleeps
per call. The shares asserted are far from the classification's edges, so a loaded machine keeps them.
"""

import time

import pytest

from perfsuite._tensorflow import tensorflow
from perfsuite.measure import stats
from perfsuite.measure.input_bound import InputBound, InputBoundRounds, measure_input_bound

tf = tensorflow()


@tf.function
def _fast_step(batch):
    return tf.reduce_sum(tf.cast(batch, tf.float32))


def _slow_pipeline(seconds):
    def sleep(i):
        time.sleep(seconds)
        return i

    options = tf.data.Options()  # no prefetch injected: each batch's work happens inside the timed fetch
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    dataset = tf.data.Dataset.range(10**6).map(lambda i: tf.numpy_function(sleep, [i], tf.int64, stateful=True))
    return dataset.batch(2).with_options(options)


def test_slow_pipeline_into_fast_step_is_highly_input_bound():
    result = measure_input_bound(step=_fast_step, dataset=_slow_pipeline(0.01), warmup=2, batches=5, rounds=3)
    assert result.classification == "highly input-bound"
    assert result.t_real > result.t_synthetic
    assert result.share == pytest.approx(stats.input_bound_share(t_synthetic=result.t_synthetic, t_real=result.t_real))
    assert len(result.real_round_s) == len(result.shares) == 3 and result.as_dict()["rounds"] == 3
    assert all(share > stats.HIGHLY_INPUT_BOUND for share in result.shares)
    # The step waits in next() for every batch: most of each round is the fetch.
    assert all(stats.HIGHLY_INPUT_BOUND < share <= 1 for share in result.wait_shares), result.wait_shares
    assert result.wait_share == pytest.approx(sorted(result.wait_shares)[1])


def test_fast_pipeline_into_slow_step_is_not_input_bound():
    def slow_step(batch):  # 60 ms: a loaded box's few ms of scheduling noise stay well below the 5 % boundary
        time.sleep(0.06)
        return tf.reduce_sum(batch)

    result = measure_input_bound(step=slow_step, dataset=tf.data.Dataset.range(10**6).batch(2).prefetch(2),
                                 warmup=2, batches=5, rounds=3)
    assert result.classification == "not input-bound", result
    assert result.wait_share < stats.MODERATELY_INPUT_BOUND, result.wait_shares  # the prefetched batch is ready


def test_rounds_can_be_added_one_at_a_time():
    rounds = InputBoundRounds(step=_fast_step, dataset=_slow_pipeline(0.002).repeat(), warmup=1, batches=2)
    for expected in (1, 2, 3):
        rounds.one_round()
        assert rounds.result().rounds == expected
    assert rounds.result().as_dict()["round_shares"] == list(rounds.result().shares)


def test_the_first_round_warms_up_and_later_rounds_settle():
    calls = []

    def counted_step(batch):
        calls.append(batch)
        return tf.reduce_sum(batch)

    rounds = InputBoundRounds(step=counted_step, dataset=tf.data.Dataset.range(10**6).batch(2), warmup=3,
                              batches=2, settle=1)
    rounds.one_round()
    assert len(calls) == 2 * (3 + 2)  # each side: warmup untimed steps, then its timed ones
    rounds.one_round()
    assert len(calls) == 2 * (3 + 2) + 2 * (1 + 2)
    assert rounds.result().as_dict()["settle"] == 1
    calls.clear()
    default = measure_input_bound(step=counted_step, dataset=tf.data.Dataset.range(10**6).batch(2), warmup=3,
                                  batches=2, rounds=2)
    assert default.settle == 3  # by default, a later round warms up as the first
    assert len(calls) == 2 * 2 * (3 + 2)


def test_a_round_lasts_round_s_sized_by_the_synthetic_sides_last_warm_up_step():
    calls = []

    def sleeping_step(batch):  # 10 ms: 5 steps make the 50 ms round, 3 at least on a slow box
        calls.append(batch)
        time.sleep(0.01)
        return tf.reduce_sum(batch)

    rounds = InputBoundRounds(step=sleeping_step, dataset=tf.data.Dataset.range(10**6).batch(2), warmup=2,
                              batches=1, settle=1, round_s=0.05)
    rounds.one_round()
    timed = rounds.result().batches
    assert 3 <= timed <= 5
    # sizing: the synthetic side's 2 warm-up steps; then the real side warms up, the synthetic one settles
    assert len(calls) == 2 + (2 + timed) + (1 + timed)
    rounds.one_round()
    assert len(calls) == 2 + (2 + timed) + (1 + timed) + 2 * (1 + timed) and rounds.result().batches == timed
    with pytest.raises(ValueError, match="round_s: expected a finite number of seconds >= 0, found -1"):
        InputBoundRounds(step=sleeping_step, dataset=tf.data.Dataset.range(4), warmup=1, batches=1, round_s=-1)


def test_input_bound_needs_an_endless_dataset_and_says_so():
    with pytest.raises(TypeError, match="tf.data.Dataset"):
        measure_input_bound(step=_fast_step, dataset=[tf.ones([2])], warmup=1, batches=1)
    with pytest.raises(ValueError, match=r"input_bound: the dataset ended after 8 batches; expected one that never ends"):
        measure_input_bound(step=_fast_step, dataset=tf.data.Dataset.range(16).batch(2), warmup=1, batches=2,
                            rounds=3)
    with pytest.raises(ValueError, match="batches: expected an integer >= 1"):
        InputBoundRounds(step=_fast_step, dataset=tf.data.Dataset.range(4), warmup=1, batches=0)
    with pytest.raises(ValueError, match="settle: expected an integer >= 0, found -1"):
        InputBoundRounds(step=_fast_step, dataset=tf.data.Dataset.range(4), warmup=1, batches=1, settle=-1)


def test_figures_from_rounds_are_medians_and_per_round_shares():
    result = InputBound.from_rounds([0.2, 0.4, 0.3], [0.1, 0.1, 0.2], [0.1, 0.04, 0.0], batches=4, warmup=1,
                                    settle=1)
    assert (result.t_real, result.t_synthetic) == (0.3, 0.1)
    assert result.share == pytest.approx(1 - 0.1 / 0.3) and result.classification == "highly input-bound"
    assert result.shares == pytest.approx((0.5, 0.75, 1 / 3))
    assert result.wait_shares == pytest.approx((0.5, 0.1, 0.0)) and result.wait_share == pytest.approx(0.1)
    with pytest.raises(ValueError, match="same number"):
        InputBound.from_rounds([0.2], [], [], batches=1, warmup=0, settle=0)
    with pytest.raises(ValueError, match="same number"):
        InputBound.from_rounds([0.2], [0.1], [], batches=1, warmup=0, settle=0)


class _Benchmark:  # a disabled pytest-benchmark: it runs the work once
    disabled = True

    def __init__(self):
        self.extra_info = {}

    def pedantic(self, target, **_):
        return target()


def test_rounds_left_undecided_are_noted_under_the_metric_whose_gate_is_undecided(monkeypatch):
    from pathlib import Path

    from perfsuite.pytest_plugin.profiles import PROFILES
    from perfsuite.pytest_plugin.recorder import Recorder, SessionContext

    context = SessionContext(profile=PROFILES["smoke"], baselines_dir=Path("."), baselines=None, gates="report",
                             save_baselines=False, margin=0.3, baseline_profile="x", history={}, compare_alpha=0.01,
                             compare_min_effect=0.1, compare_mode="report")
    recorder = Recorder(benchmark=_Benchmark(), context=context, nodeid="benchmarks/test_x.py::t")
    monkeypatch.setattr(recorder, "gate_undecided", lambda name, value, rounds: name == "x_input_wait")
    recorder.measure_input_bound(step=_fast_step, dataset=tf.data.Dataset.range(10**6).batch(2), warmup=1, batches=2,
                                 metric="x_input_bound")
    [note] = recorder.notes
    assert note.startswith("x_input_wait: max_rounds reached with a gate still inconclusive"), note


def test_the_sides_alternate_the_real_pipeline_first_in_even_rounds_and_last_in_odd_ones():
    seen = []

    def step(batch):  # a plain Python step: records each batch it is fed (the twin repeats batch [0, 1])
        seen.append(int(batch.numpy()[0]))
        return tf.constant(0.0)

    result = measure_input_bound(step=step, dataset=tf.data.Dataset.range(10**6).batch(2), warmup=0, settle=0,
                                 batches=2, rounds=4)
    assert result.rounds == 4
    real, twin = "R", "T"
    sides = "".join(twin if first == 0 and i > 1 else real for i, first in enumerate(seen))
    assert sides == "RR" + "TT" + "TT" + "RR" + "RR" + "TT" + "TT" + "RR"


class _Opened:
    """Iterators made of a dataset, one per side and round, each closed or not."""

    def __init__(self):
        self.made, self.closed = [], []

    def __call__(self, dataset):
        opened = self

        class Iterator:
            def __init__(self):
                self.inner, self.index = iter(dataset), len(opened.made)

            def __next__(self):
                return next(self.inner)

            def close(self):
                opened.closed.append(self.index)

        iterator = Iterator()
        opened.made.append(dataset)
        return iterator


def test_diagnoses_contract_a_fresh_iterator_per_side_and_round_the_twin_first_and_rounds_resized():
    # diagnose --pipeline's input-bound share: a fresh iterator per side and round, closed inside it, each
    # warming up again; the twin (a batch it read, repeated) first in even rounds; a second pass's sizes.
    seen, opened = [], _Opened()

    def step(batch):
        seen.append(int(batch.numpy()[0]))
        return tf.constant(0.0)

    from perfsuite.measure.step_model import StepModel

    model = StepModel(step, name="--step m:f")
    dataset = tf.data.Dataset.range(6).batch(2)  # finite: the fresh iterators restart nothing here
    twin = tf.data.Dataset.from_tensors(tf.constant([100, 101], tf.int64)).repeat()
    rounds = InputBoundRounds(step=model, dataset=dataset, warmup=1, batches=2, twin=twin, twin_first=True,
                              fresh=opened)
    rounds.one_round()
    rounds.batches = 1
    rounds.one_round()
    assert opened.made == [twin, dataset, dataset, twin] and opened.closed == [0, 1, 2, 3]
    assert seen == [100] * 3 + [0, 2, 4] + [0, 2] + [100] * 2  # warm-up + timed, every side and round
    assert rounds.calls == len(seen) and rounds.rounds == 2
    result = rounds.result()
    assert result.rounds == 2 and result.batches == 1 and len(result.wait_round_s) == 2
