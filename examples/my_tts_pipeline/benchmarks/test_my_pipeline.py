"""Benchmarks of my own pipeline with perfsuite's measuring API (the `perfsuite` fixture)."""

import my_pipeline


def test_pipeline_throughput(perfsuite):
    """Steady samples/s of my dataset: warm-up apart, rounds within the run profile's time budget."""
    measurement = perfsuite.measure_dataset(my_pipeline.make_dataset(), name="my_pipeline")
    assert measurement.samples_per_s > 0


def test_step_speed(perfsuite):
    """My compiled step on one batch: its first call (trace + compile) apart, then steady calls."""
    batch = next(iter(my_pipeline.make_dataset()))
    measurement = perfsuite.measure_step(my_pipeline.make_step(), batches=iter(lambda: batch, None),
                                         name="my_step")
    assert measurement.traces == 1  # a static input signature: traced once


def test_input_bound(perfsuite):
    """How much of my step's time is spent waiting for my pipeline (gated in baselines/ratios.yaml)."""
    result = perfsuite.measure_input_bound(step=my_pipeline.make_step(),
                                           dataset=my_pipeline.make_dataset().repeat(),
                                           metric="my_pipeline_input_bound")
    assert result.t_real > 0


def test_prefetch_ratio(perfsuite):
    """Interleaved rounds: my pipeline with prefetch over without, as a same-run ratio."""
    from perfsuite.measure.timing import measure_dataset

    def rounds_of(dataset):
        iterator = iter(dataset.repeat())
        return lambda: measure_dataset(dataset=iterator, warmup_batches=1, measure_batches=4)

    perfsuite.compare("prefetch_over_no_prefetch_ratio", a=rounds_of(my_pipeline.make_dataset()),
                      b=rounds_of(my_pipeline.make_dataset(prefetch=False)))
