"""diagnose's work: fingerprints of a user-style pipeline and step, the achieved rates derived from them and
the measured peak, and what is said when a part cannot be read."""

import pytest

from perfsuite.measure.peak import measure_peak
from perfsuite.tools.diagnose.work import read_work, with_rates
from perfsuite.verdict.pipeline_findings import work_verdicts

tf = pytest.importorskip("tensorflow")


def measure_work(dataset, step, batch, *, pipeline_name, step_name, **rates):
    """The work read, then set against the run's rates, as diagnose's run does."""
    work = read_work(dataset, step, batch, pipeline_name=pipeline_name, step_name=step_name)
    return with_rates(work, **rates)


def _tuple_pipeline():
    """Tuple batches (tokens, mel, mel_len) with a float-op map, a trailing prefetch and with_options."""
    def element(i):
        frames = 20 + i % 5
        mel = tf.matmul(tf.ones([frames, 8]), tf.ones([8, 8]))
        return tf.range(5), mel, frames

    options = tf.data.Options()
    options.experimental_deterministic = True
    return (tf.data.Dataset.range(16).map(element, num_parallel_calls=2)
            .padded_batch(4, padded_shapes=([None], [32, 8], [])).prefetch(8).with_options(options))


@tf.function
def _step(batch):
    _tokens, mel, _lengths = batch
    return tf.reduce_sum(tf.matmul(mel, tf.ones([8, 16])))


def test_peak_is_a_positive_rate_with_its_interval():
    peak = measure_peak(rounds=3, calls=2, sizes=(32, 64))
    assert peak.rounds == 3
    assert 0 < peak.low <= peak.float_ops_per_s <= peak.high
    assert peak.share(peak.float_ops_per_s) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="rounds, calls, size"):
        measure_peak(rounds=0)


def test_the_peak_is_the_best_size_measured(monkeypatch):
    from perfsuite.measure import peak

    def planted(*, rounds, calls, size):
        return peak.PeakRate(float_ops_per_s=float(size % 7), low=0.0, high=9.0, rounds=rounds, kernel=str(size))

    monkeypatch.setattr(peak, "matmul_rate", planted)
    assert peak.measure_peak(sizes=(13, 12, 8)).kernel == "13"  # 13 % 7 = 6, the highest


def test_work_of_a_tuple_pipeline_and_its_step_is_set_against_the_measured_rates():
    dataset = _tuple_pipeline()
    batch = next(iter(dataset))
    figures = measure_work(dataset, _step, batch, pipeline_name="recipe", step_name="train_step",
                           audio_s_per_sample=0.25, samples_per_s=100.0, step_s=0.01)
    assert figures.unavailable == ()
    per_sample = figures.pipeline.work["float_ops_per_sample"]
    assert per_sample > 0
    assert figures.pipeline_float_ops_per_audio_s == pytest.approx(per_sample / 0.25)
    assert figures.pipeline_float_ops_per_s == pytest.approx(per_sample * 100.0)
    assert figures.step_float_ops_per_s == pytest.approx(figures.step.work["float_ops_per_step"] / 0.01)
    assert figures.peak is not None and figures.peak.float_ops_per_s > 0
    words = [finding.finding for finding in work_verdicts(figures)]
    assert len(words) == 2
    assert all("of this machine's measured peak" in w for w in words)
    assert "the pipeline's work" in words[0] and "the step's work" in words[1]


def test_no_rate_measured_means_no_peak_and_no_share():
    dataset = _tuple_pipeline()
    figures = measure_work(dataset, None, None, pipeline_name="recipe", step_name=None,
                           audio_s_per_sample=None, samples_per_s=None, step_s=None)
    assert figures.step is None and figures.peak is None and figures.pipeline_float_ops_per_s is None
    (finding,) = work_verdicts(figures)
    assert "peak" not in finding.finding and finding.evidence["float_ops_per_sample"] > 0


def test_an_unreadable_pipeline_is_named_not_skipped():
    figures = measure_work([1, 2, 3], None, None, pipeline_name="not_a_dataset", step_name=None,
                           audio_s_per_sample=None, samples_per_s=10.0, step_s=None)
    assert figures.pipeline is None and figures.peak is None
    (finding,) = work_verdicts(figures)
    assert finding.finding.startswith("not read: not_a_dataset: expected a tf.data.Dataset, found list")
