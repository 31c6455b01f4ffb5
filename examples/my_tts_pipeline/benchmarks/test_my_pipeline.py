"""Benchmarks of my own pipeline with perfsuite's measuring API (the `perfsuite` fixture).

Each test asserts what it measured is a measurement: finite, in the range the quantity can take, and
judged by the gate my baselines/ratios.yaml declares for it. Whether it is fast enough is the gates' call.
"""

import math

import my_pipeline

BATCH_SIZE = 16
# With 2 map workers, prefetch can at most overlap the consumer with the producer: the ratio stays near 1.
# Outside this range the measurement, not the pipeline, is broken.
PLAUSIBLE_PREFETCH_RATIO = (0.5, 4.0)


def _finite_positive(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _verdicts(perfsuite) -> dict:
    """My gates' verdicts on what this benchmark reported, as the plugin decides them after the test."""
    check = perfsuite.context.baselines.check(benchmark_id=perfsuite.benchmark_id, metrics=perfsuite.metrics,
                                              rounds=perfsuite.rounds)
    return {verdict.metric: verdict for verdict in check.verdicts}


def test_pipeline_throughput(perfsuite):
    """Steady samples/s of my dataset: warm-up apart, rounds within the run profile's time budget."""
    measurement = perfsuite.measure_dataset(my_pipeline.make_dataset(batch_size=BATCH_SIZE), name="my_pipeline")
    assert _finite_positive(measurement.samples_per_s), measurement.samples_per_s
    rounds = perfsuite.rounds["samples_per_s"]
    assert len(rounds) >= perfsuite.profile.min_rounds and all(_finite_positive(r) for r in rounds), rounds
    assert measurement.batch_samples and set(measurement.batch_samples) == {BATCH_SIZE}  # full, padded batches


def test_step_speed(perfsuite):
    """My compiled step on one batch: its first call (trace + compile) apart, then steady calls."""
    batch = next(iter(my_pipeline.make_dataset(batch_size=BATCH_SIZE)))
    measurement = perfsuite.measure_step(my_pipeline.make_step(), batches=iter(lambda: batch, None),
                                         name="my_step")
    assert measurement.traces == 1  # a static input signature: traced once
    assert _finite_positive(measurement.samples_per_s), measurement.samples_per_s


def test_input_bound(perfsuite):
    """How much of my step's time is spent waiting for my pipeline (gated in baselines/ratios.yaml)."""
    result = perfsuite.measure_input_bound(step=my_pipeline.make_step(),
                                           dataset=my_pipeline.make_dataset().repeat(),
                                           metric="my_pipeline_input_bound")
    assert _finite_positive(result.t_real) and _finite_positive(result.t_synthetic), result
    # 1 - t_synthetic / t_real: at most 1, and negative only by noise (a twin twice as slow is a broken run).
    assert all(-1 < share <= 1 for share in result.shares), result.shares
    assert all(0 <= share <= 1 for share in result.wait_shares), result.wait_shares  # a part of each round
    assert result.rounds >= perfsuite.profile.min_rounds
    assert "my_pipeline_input_wait" in _verdicts(perfsuite)


def test_prefetch_ratio(perfsuite):
    """Interleaved rounds: my pipeline with prefetch over without, as a same-run ratio."""
    from perfsuite.measure.timing import measure_dataset

    def rounds_of(dataset):
        iterator = iter(dataset.repeat())
        return lambda: measure_dataset(dataset=iterator, warmup_batches=1, measure_batches=4)

    result = perfsuite.compare("prefetch_over_no_prefetch_ratio", a=rounds_of(my_pipeline.make_dataset()),
                               b=rounds_of(my_pipeline.make_dataset(prefetch=False)))
    low, high = PLAUSIBLE_PREFETCH_RATIO
    assert all(low < ratio < high for ratio in result.ratios), result.ratios
    assert "prefetch_over_no_prefetch_ratio" in _verdicts(perfsuite)
