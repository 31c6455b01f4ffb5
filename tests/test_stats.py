"""Statistics: summaries, stability warnings, cycle detection rates, comparisons, ratios, input bound.

The cycle-detector rates are printed (run with -s to see them) and asserted.
"""

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.measure import stats

positive = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
samples = st.lists(positive, min_size=2, max_size=60)


def test_stats_module_does_not_import_tensorflow():
    code = "import sys, perfsuite.measure.stats; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# ------------------------------------------------------------------------------------ summaries


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=80))
def test_summarize_matches_numpy(values):
    summary = stats.summarize(values)
    array = np.asarray(values)
    assert summary.n == len(values)
    assert summary.mean == pytest.approx(np.mean(array), rel=1e-9, abs=1e-6)
    assert summary.median == pytest.approx(np.median(array))
    assert summary.min == min(values) and summary.max == max(values)
    expected_std = np.std(array, ddof=1) if len(values) > 1 else 0.0
    assert summary.std == pytest.approx(expected_std, rel=1e-9, abs=1e-6)
    assert summary.p95 == pytest.approx(np.percentile(array, 95))
    assert summary.p99 == pytest.approx(np.percentile(array, 99))


@given(samples)
def test_percentiles_are_ordered(values):
    s = stats.summarize(values)
    assert s.min <= s.p50 <= s.p95 <= s.p99 <= s.max
    assert s.p50 == s.median


@given(samples, st.floats(min_value=1e-3, max_value=1e3))
def test_variation_ratio_and_robust_cv_are_scale_invariant(values, scale):
    base = stats.summarize(values)
    scaled = stats.summarize([v * scale for v in values])
    assert scaled.variation_ratio == pytest.approx(base.variation_ratio, rel=1e-6, abs=1e-12)
    assert scaled.robust_cv == pytest.approx(base.robust_cv, rel=1e-6, abs=1e-12)


def test_robust_cv_matches_cv_for_normal_data_and_ignores_stalls():
    rng = np.random.default_rng(1)
    values = 1 + 0.1 * rng.standard_normal(20000)
    summary = stats.summarize(values)
    assert summary.variation_ratio == pytest.approx(0.1, rel=0.05)
    assert summary.robust_cv == pytest.approx(0.1, rel=0.05)
    values[::10] *= 5  # a stall every 10th value
    stalled = stats.summarize(values)
    assert stalled.variation_ratio > 0.5
    assert stalled.robust_cv < 0.15


def test_summarize_rejects_empty_and_non_finite():
    with pytest.raises(ValueError, match="at least one value"):
        stats.summarize([])
    with pytest.raises(ValueError, match="index 1"):
        stats.summarize([1.0, math.nan])


def test_summary_as_dict_has_every_field():
    summary = stats.summarize([1.0, 2.0, 3.0])
    assert summary.as_dict()["p99"] == summary.p99
    assert set(summary.as_dict()) >= {"n", "mean", "median", "std", "variation_ratio", "robust_cv"}


# ---------------------------------------------------------------------------- stability warnings


def test_stable_sample_has_no_warnings():
    rng = np.random.default_rng(2)
    assert stats.stability_warnings(1 + 0.02 * rng.standard_normal(50)) == ()


def test_warnings_name_the_figures():
    rng = np.random.default_rng(3)
    noisy = 1 + 0.3 * rng.standard_normal(50)
    noisy = np.abs(noisy) + 0.1
    (std_warning, *_) = [w for w in stats.stability_warnings(noisy) if "standard deviation" in w]
    assert "% of the mean" in std_warning

    outlier = np.ones(30)
    outlier[7] = 3.0
    warnings = stats.stability_warnings(outlier)
    assert any(w.startswith("the maximum (3)") and "greater than the mean" in w for w in warnings)

    assert stats.stability_warnings([1.0, 1.0, 1.0], min_samples=5) == (
        "only 3 values; at least 5 are needed for a stable result",
    )


# --------------------------------------------------------------------------------------- cycles

FALSE_POSITIVE_SERIES = 400
HIT_SERIES = 40


def _white_noise(rng, kind, n):
    if kind == "gaussian":
        return 1 + 0.1 * rng.standard_normal(n)
    if kind == "lognormal":
        return rng.lognormal(0.0, 1.0, n)  # heavy right tail: max/median ~ 10-20x
    return 1 + rng.pareto(1.5, n)  # infinite variance


def _planted_stall(rng, *, n, period, factor, noise):
    phase = rng.integers(period)
    times = np.ones(n)
    times[phase::period] = factor
    if noise == "gaussian":
        times *= 1 + 0.1 * rng.standard_normal(n)
    else:
        times *= rng.lognormal(0.0, 0.1, n)
    return times


def _report(label, rates):
    print(f"\n{label}: " + ", ".join(f"{key}={value:.3f}" for key, value in rates.items()), file=sys.stderr)


def test_cycle_false_positive_rate_on_white_noise_is_at_most_5_percent():
    rng = np.random.default_rng(20240601)
    rates = {}
    for n in (64, 200):
        for kind in ("gaussian", "lognormal", "pareto"):
            hits = sum(stats.detect_cycle(_white_noise(rng, kind, n)).significant for _ in range(FALSE_POSITIVE_SERIES))
            rates[f"{kind}/n{n}"] = hits / FALSE_POSITIVE_SERIES
    _report(f"cycle false-positive rate, {FALSE_POSITIVE_SERIES} white-noise series each", rates)
    assert max(rates.values()) <= 0.05, rates


def test_cycle_is_not_called_on_persistence_or_a_level_shift():
    rng = np.random.default_rng(7)
    flagged = {"ar1": 0, "level_shift": 0, "drift": 0}
    for _ in range(200):
        n = 200
        ar = np.zeros(n)
        shocks = rng.standard_normal(n)
        for t in range(1, n):
            ar[t] = 0.6 * ar[t - 1] + shocks[t]
        shift = np.where(np.arange(n) < rng.integers(20, 180), 1.0, 1.3) * (1 + 0.1 * rng.standard_normal(n))
        drift = np.linspace(1.0, 1.5, n) * (1 + 0.1 * rng.standard_normal(n))
        flagged["ar1"] += stats.detect_cycle(np.exp(0.1 * ar)).significant
        flagged["level_shift"] += stats.detect_cycle(shift).significant
        flagged["drift"] += stats.detect_cycle(drift).significant
    rates = {key: value / 200 for key, value in flagged.items()}
    _report("cycle false-positive rate on non-periodic structure, 200 series of n=200", rates)
    assert max(rates.values()) <= 0.05, rates


def test_cycle_hit_rate_on_planted_stall_is_at_least_95_percent():
    # Stall 2x the baseline amid 10 % noise, periods 5..16 with at least four periods in view
    # (the default max_lag is n // 4), n across the quick profile's range.
    rng = np.random.default_rng(99)
    rates = {}
    for n in (48, 64, 100, 200):
        right = total = 0
        for period in range(5, min(16, n // 4) + 1):
            for noise in ("gaussian", "lognormal"):
                for _ in range(HIT_SERIES):
                    cycle = stats.detect_cycle(_planted_stall(rng, n=n, period=period, factor=2.0, noise=noise))
                    right += cycle.significant and cycle.period == period
                    total += 1
        rates[f"n{n}"] = right / total
    _report(f"cycle hit rate with the right period, 2x stall, periods 5..16, {HIT_SERIES} series per case", rates)
    assert min(rates.values()) >= 0.95, rates


def test_cycle_survives_random_hiccups():
    # Every 8th batch costs 5x, plus 1 % of batches hit by a random 3x-30x hiccup.
    rng = np.random.default_rng(5)
    right = 0
    for _ in range(200):
        times = _planted_stall(rng, n=100, period=8, factor=5.0, noise="lognormal")
        hiccup = rng.random(100) < 0.01
        times[hiccup] *= rng.uniform(3, 30, hiccup.sum())
        cycle = stats.detect_cycle(times)
        right += cycle.significant and cycle.period == 8
    _report("cycle hit rate, 5x stall every 8th of 100 batches with 1 % random hiccups", {"rate": right / 200})
    assert right / 200 >= 0.95


def test_cycle_reports_the_fundamental_not_a_multiple():
    rng = np.random.default_rng(11)
    for period in (2, 3, 4, 6):
        cycle = stats.detect_cycle(_planted_stall(rng, n=200, period=period, factor=3.0, noise="gaussian"))
        assert cycle.significant and cycle.period == period, cycle
        assert cycle.strength > cycle.threshold
        assert cycle.lags_tested == 200 // 4 - 1


def test_cycle_needs_min_points_and_variation():
    short = stats.detect_cycle([1.0, 5.0] * 10)
    assert not short.significant and short.period is None
    assert "too few points: 20 < min_points=32" in short.note
    constant = stats.detect_cycle([2.0] * 64)
    assert not constant.significant and "constant" in constant.note
    assert stats.detect_cycle([1.0, 1.0, 5.0] * 8, min_points=16).period == 3
    with pytest.raises(ValueError, match="positive times, found 0.0 at index 3"):
        stats.detect_cycle([1.0, 1.0, 1.0, 0.0] * 10)
    with pytest.raises(ValueError, match="max_lag"):
        stats.detect_cycle(np.ones(64), max_lag=40)


def test_cycle_as_dict():
    cycle = stats.detect_cycle(np.tile([1.0, 1.0, 1.0, 4.0], 16))
    assert cycle.as_dict()["period"] == 4 and cycle.as_dict()["significant"] is True


# ----------------------------------------------------------------------------------- paired ratios


@given(st.lists(st.tuples(positive, positive), min_size=1, max_size=30))
def test_swapping_a_and_b_inverts_the_ratio_summary(pairs):
    a = [x for x, _ in pairs]
    b = [y for _, y in pairs]
    ab = stats.ratio_summary(stats.ratio_of(a, b))
    ba = stats.ratio_summary(stats.ratio_of(b, a))
    assert ab.median * ba.median == pytest.approx(1.0, rel=1e-9)
    assert ab.low * ba.high == pytest.approx(1.0, rel=1e-9)
    assert ab.spread == pytest.approx(ba.spread, rel=1e-9, abs=1e-12)
    assert ab.low <= ab.median <= ab.high


def test_ratio_helpers_validate_inputs():
    assert stats.ratio_of([2.0, 3.0], [1.0, 6.0]) == (2.0, 0.5)
    with pytest.raises(ValueError, match="equally long"):
        stats.ratio_of([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="b: expected positive numbers, found 0.0 at index 1"):
        stats.ratio_of([1.0, 1.0], [1.0, 0.0])
    summary = stats.ratio_summary([1.0, 2.0, 4.0])
    assert summary.median == pytest.approx(2.0) and summary.n == 3
    assert summary.as_dict()["values"] == [1.0, 2.0, 4.0]


# --------------------------------------------------------------------------------- input bound


def test_paired_gain_needs_gain_consistency_and_significance():
    steady = stats.paired_gain(candidate=[150, 162, 149], reference=[100, 105, 98])
    assert steady.significant and steady.wins == 3 and steady.p_value < 0.05
    assert steady.summary.median == pytest.approx(1.52, abs=0.01)
    assert steady.rounds == 3 and stats.PairedGain.from_dict(steady.as_dict()) == steady
    erratic = stats.paired_gain(candidate=[105, 180, 130], reference=[100, 100, 100])
    assert erratic.wins == 3 and erratic.summary.median == pytest.approx(1.3) and erratic.p_value > 0.05
    assert not erratic.significant
    small = stats.paired_gain(candidate=[105, 105, 105], reference=[100, 100, 100])  # no spread: p from the sign
    assert small.p_value == 0.0 and not small.significant  # 5 % < the 10 % minimum gain
    slower = stats.paired_gain(candidate=[50, 50], reference=[100, 100])
    assert slower.p_value == 1.0 and not slower.significant
    single = stats.paired_gain(candidate=[300], reference=[100])
    assert single.p_value is None and not single.significant
    with pytest.raises(ValueError, match="equally long"):
        stats.paired_gain(candidate=[1, 2], reference=[1])
    with pytest.raises(ValueError, match="min_win_share"):
        stats.paired_gain(candidate=[1, 2], reference=[1, 2], min_win_share=0)


def test_input_bound_share_and_classification():
    assert stats.input_bound_share(t_synthetic=0.8, t_real=1.0) == pytest.approx(0.2)
    assert stats.input_bound_share(t_synthetic=1.1, t_real=1.0) == pytest.approx(-0.1)
    assert stats.classify_input_bound(-0.1) == "not input-bound"
    assert stats.classify_input_bound(0.0499) == "not input-bound"
    assert stats.classify_input_bound(0.05) == "moderately input-bound"
    assert stats.classify_input_bound(0.1999) == "moderately input-bound"
    assert stats.classify_input_bound(0.20) == "highly input-bound"
    assert stats.classify_input_bound(0.95) == "highly input-bound"
    with pytest.raises(ValueError, match="t_real"):
        stats.input_bound_share(t_synthetic=1.0, t_real=0.0)
    with pytest.raises(ValueError, match="NaN"):
        stats.classify_input_bound(math.nan)


@given(st.integers(0, 300), st.integers(-2, 302))
def test_the_exact_binomial_tail_matches_scipy(trials, successes):
    from scipy import stats as sps

    expected = float(sps.binom.sf(successes - 1, trials, 0.5))
    assert math.isclose(stats.binomial_tail(successes, trials), expected, rel_tol=1e-9, abs_tol=1e-300)


@given(st.integers(2, 400), st.floats(0.5, 0.99))
def test_the_median_intervals_order_coverage_matches_scipy(n, confidence):
    from scipy import stats as sps

    interval = stats.median_interval(np.arange(n, dtype=float), confidence=confidence)
    k = int(interval.low) + 1  # x_(k) of 0, 1, ..., n - 1
    assert math.isclose(interval.coverage, float(1 - 2 * sps.binom.cdf(k - 1, n, 0.5)), rel_tol=1e-9, abs_tol=1e-12)
