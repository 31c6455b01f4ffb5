"""Statistics for performance measurements: summaries, stability warnings, cycle detection,
significance tests and paired ratios.

No TensorFlow here: numpy and scipy only, so baselines, reports and the plugin can use it cheaply.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special as spspecial

from perfsuite.records import Record

# 1.4826 * MAD estimates the standard deviation of normally distributed data (1 / Phi^-1(3/4)),
# so the robust CV is directly comparable to std/mean on well-behaved data.
MAD_TO_STD = 1.4826


def _as_array(values, *, name: str = "values") -> np.ndarray:
    """Validate a 1-D sequence of finite numbers."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of numbers, found shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name}: expected at least one value, found none")
    if not np.all(np.isfinite(array)):
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"{name}: expected finite numbers, found {array[bad]} at index {bad}")
    return array


def _mad(array: np.ndarray) -> float:
    return float(np.median(np.abs(array - np.median(array))))


# --------------------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Summary(Record):
    """Descriptive statistics of one sample.

    std is the sample standard deviation (ddof=1; 0.0 for a single value). p50 is the median; p95 and
    p99 use numpy's default linear interpolation. variation_ratio = std / mean. robust_cv = 1.4826 * MAD / median,
    where MAD is the median absolute deviation from the median; the 1.4826 factor makes it equal the
    coefficient of variation for normal data while ignoring the occasional stall. Either is None when its
    denominator is 0 (an all-zero sample has no scale to compare to).
    """

    n: int
    mean: float
    median: float
    std: float
    min: float
    max: float
    p50: float
    p95: float
    p99: float
    variation_ratio: float | None
    robust_cv: float | None


def _ratio(numerator: float, denominator: float) -> float | None:
    # A zero mean or median only happens for all-zero samples; there is no scale to compare to.
    return numerator / denominator if denominator != 0 else None


def summarize(values) -> Summary:
    """Summarize a non-empty sequence of finite numbers (raises ValueError on empty input)."""
    array = _as_array(values)
    mean = float(np.mean(array))
    median = float(np.median(array))
    std = float(np.std(array, ddof=1)) if array.size > 1 else 0.0
    p95, p99 = (float(v) for v in np.percentile(array, [95, 99]))
    return Summary(
        n=int(array.size),
        mean=mean,
        median=median,
        std=std,
        min=float(np.min(array)),
        max=float(np.max(array)),
        p50=median,
        p95=p95,
        p99=p99,
        variation_ratio=_ratio(std, mean),
        robust_cv=_ratio(MAD_TO_STD * _mad(array), median),
    )


def stability_warnings(values, *, min_samples: int = 20) -> tuple[str, ...]:
    """pyperf-style warnings about a sample that is too noisy to judge.

    Warns when the standard deviation is >= 10 % of the mean, when the minimum or the maximum is
    >= 50 % away from the mean (pyperf's obvious-outlier check), and when there are fewer than
    min_samples values.
    """
    array = _as_array(values)
    warnings = []
    if array.size < min_samples:
        warnings.append(f"only {array.size} values; at least {min_samples} are needed for a stable result")
    mean = float(np.mean(array))
    if mean <= 0:
        warnings.append(f"the mean ({mean:.6g}) is not positive; relative checks skipped")
        return tuple(warnings)
    if array.size >= 2:
        std = float(np.std(array, ddof=1))
        percent = 100.0 * std / mean
        if percent >= 10.0:
            warnings.append(f"the standard deviation ({std:.6g}) is {percent:.0f}% of the mean ({mean:.6g})")
    for label, value in (("minimum", float(np.min(array))), ("maximum", float(np.max(array)))):
        percent = 100.0 * (value - mean) / mean
        if abs(percent) >= 50.0:
            side = "greater" if percent > 0 else "smaller"
            warnings.append(f"the {label} ({value:.6g}) is {abs(percent):.0f}% {side} than the mean ({mean:.6g})")
    return tuple(warnings)


# ----------------------------------------------------------------------------------------- cycles


@dataclass(frozen=True)
class Cycle(Record):
    """Result of detect_cycle.

    period: lag (in samples) of the cycle, None when not significant. strength: autocorrelation at
    the reported lag (the period, or the strongest lag tested when nothing is significant).
    threshold: the significance band at that lag; strength and threshold are None when no lag was tested
    (too few points, a constant series). lags_tested: how many lags were tested (the Bonferroni count m).
    note: why the result is what it is, in words.
    """

    significant: bool
    period: int | None
    strength: float | None
    threshold: float | None
    n: int
    lags_tested: int
    note: str


# Robust z-scores are clipped here: a periodic stall (2x the baseline amid 10 % noise sits about 7
# robust standard deviations up) keeps its full weight, while a single 30x hiccup cannot dominate the
# autocorrelation's denominator and drown the stalls. Chosen by simulation (see tests/test_stats.py).
_CLIP_Z = 6.0


def _robust_z(log_values: np.ndarray) -> np.ndarray | None:
    """Median/MAD standardization, clipped; None for a constant series."""
    centre = np.median(log_values)
    scale = MAD_TO_STD * _mad(log_values)
    if scale == 0:
        # More than half the values are identical (coarse timer); the mean absolute deviation,
        # scaled to a normal standard deviation, still measures the spread of the rest.
        scale = math.sqrt(math.pi / 2) * float(np.mean(np.abs(log_values - centre)))
    if scale == 0:
        return None
    return np.clip((log_values - centre) / scale, -_CLIP_Z, _CLIP_Z)


def _detrend(series: np.ndarray) -> np.ndarray:
    """Remove the mean and a least-squares line, so slow drift does not look like correlation."""
    t = np.arange(series.size) - (series.size - 1) / 2
    slope = float(np.dot(series, t) / np.dot(t, t))
    return series - series.mean() - slope * t


def _autocorrelation(series: np.ndarray, max_lag: int) -> np.ndarray:
    """Standard (biased) sample autocorrelation r_0..r_max_lag via FFT."""
    centred = series - series.mean()
    spectrum = np.fft.rfft(centred, 2 * centred.size)
    acov = np.fft.irfft(spectrum * np.conj(spectrum), 2 * centred.size)[: max_lag + 1]
    return acov / acov[0]


def detect_cycle(values, *, alpha: float = 0.05, min_points: int = 32, max_lag: int | None = None) -> Cycle:
    """Test per-batch times for a periodic pattern (e.g. every 8th batch stalls).

    Method:
    1. Robust transform: log of the times (stalls are multiplicative), median/MAD z-scores clipped to
       +-6, then a least-squares line removed. Heavy tails and a slow drift then neither fake nor hide
       a cycle.
    2. Sample autocorrelation r_k for lags k = 2..max_lag (default n // 4, so at least four
       repetitions of the period are in view; lag 1 is persistence, not a cycle).
    3. Significance band at lag k: z * sqrt((1 + 2 * sum_{j<k} r_j^2) / n) with
       z = Phi^-1(1 - alpha / (2m)), a Bonferroni correction over the m lags tested. The sum is
       Bartlett's formula restricted to the r_j that lie outside the white-noise band z / sqrt(n), so
       white noise keeps the plain +-z/sqrt(n) band while a persistent series (a level shift, a
       wandering load) widens it.
    4. A lag counts when r_k is above its band, is a local maximum (r_{k-1} < r_k >= r_{k+1}), and
       rises at least one band-width above the lowest r_j at a shorter lag -- a decaying
       autocorrelation (persistence) has no such dip, a cycle does.
    5. Period: the lag with the strongest qualifying r_k, replaced by its smallest divisor that also
       qualifies with at least half that strength, so the fundamental is reported, not a multiple.

    values must be positive (times). Fewer than min_points values give significant=False with a note.
    """
    array = _as_array(values)
    n = int(array.size)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a probability in (0, 1), found {alpha}")
    if np.any(array <= 0):
        bad = int(np.flatnonzero(array <= 0)[0])
        raise ValueError(f"values: expected positive times, found {array[bad]} at index {bad}")
    if n < min_points:
        return Cycle(significant=False, period=None, strength=None, threshold=None, n=n, lags_tested=0,
                     note=f"too few points: {n} < min_points={min_points}")
    if max_lag is None:
        max_lag = n // 4
    if not 2 <= max_lag <= n // 2:
        raise ValueError(f"max_lag: expected 2 <= max_lag <= n // 2 = {n // 2}, found {max_lag}")

    z_scores = _robust_z(np.log(array))
    m = max_lag - 1
    if z_scores is None:
        return Cycle(significant=False, period=None, strength=None, threshold=None, n=n, lags_tested=m,
                     note="constant series: no variation to correlate")
    r = _autocorrelation(_detrend(z_scores), max_lag + 1)

    z_crit = float(spspecial.ndtri(1 - alpha / (2 * m)))
    lags = np.arange(2, max_lag + 1)
    shorter = r[1:max_lag]  # r_1 .. r_{max_lag-1}: for lag k, the lags j < k are shorter[: k - 1]
    outside = np.where(np.abs(shorter) > z_crit / math.sqrt(n), shorter, 0.0)
    bands = z_crit * np.sqrt((1 + 2 * np.cumsum(outside**2)) / n)
    at_lag = r[2 : max_lag + 1]
    above = at_lag > bands
    local_max = (at_lag > r[1:max_lag]) & (at_lag >= r[3 : max_lag + 2])
    prominent = at_lag - np.minimum.accumulate(shorter) > bands
    qualifies = above & local_max & prominent

    if not qualifies.any():
        strongest = int(np.argmax(at_lag))
        return Cycle(
            significant=False, period=None, strength=float(at_lag[strongest]), threshold=float(bands[strongest]),
            n=n, lags_tested=m,
            note=f"no significant autocorrelation peak at lags 2..{max_lag} (alpha={alpha}, Bonferroni over {m} lags)",
        )
    best = int(lags[np.argmax(np.where(qualifies, at_lag, -np.inf))])
    period = best
    for divisor in range(2, best):
        index = divisor - 2
        if best % divisor == 0 and qualifies[index] and at_lag[index] >= 0.5 * at_lag[best - 2]:
            period = divisor
            break
    index = period - 2
    return Cycle(
        significant=True, period=period, strength=float(at_lag[index]), threshold=float(bands[index]),
        n=n, lags_tested=m,
        note=f"values repeat every {period} samples: autocorrelation {at_lag[index]:.2f} > band {bands[index]:.2f}",
    )


# ---------------------------------------------------------------------------------- paired ratios


def ratio_of(a, b) -> tuple[float, ...]:
    """Element-wise a[i] / b[i] of two equally long sequences of positive numbers."""
    a_array = _as_array(a, name="a")
    b_array = _as_array(b, name="b")
    if a_array.size != b_array.size:
        raise ValueError(f"a, b: expected equally long sequences, found {a_array.size} and {b_array.size}")
    for name, array in (("a", a_array), ("b", b_array)):
        if np.any(array <= 0):
            bad = int(np.flatnonzero(array <= 0)[0])
            raise ValueError(f"{name}: expected positive numbers, found {array[bad]} at index {bad}")
    return tuple(float(v) for v in a_array / b_array)


@dataclass(frozen=True)
class RatioSummary(Record):
    """Summary of paired ratios, computed in log space so that inverting every ratio (swapping A and
    B) inverts median, swaps and inverts low/high, and leaves spread unchanged.

    median: the middle ratio; for an even count, the geometric mean of the two middle ones. low / high: smallest and largest ratio
    (with the handful of rounds we run, percentiles would only interpolate between the extremes).
    spread: relative IQR, exp(IQR of the log ratios) - 1, about (q75 - q25) / median for small spreads.
    """

    median: float
    low: float
    high: float
    spread: float
    n: int
    values: tuple[float, ...]


def ratio_summary(ratios) -> RatioSummary:
    array = _as_array(ratios, name="ratios")
    if np.any(array <= 0):
        bad = int(np.flatnonzero(array <= 0)[0])
        raise ValueError(f"ratios: expected positive numbers, found {array[bad]} at index {bad}")
    ordered = np.sort(array)
    middle = ordered.size // 2
    if ordered.size % 2:
        median = float(ordered[middle])
    else:  # geometric mean of the two middle ratios: exactly inverts when the ratios are inverted
        median = math.sqrt(float(ordered[middle - 1]) * float(ordered[middle]))
    q25, q75 = np.percentile(np.log(array), [25, 75])
    return RatioSummary(
        median=median,
        low=float(np.min(array)),
        high=float(np.max(array)),
        spread=float(np.expm1(q75 - q25)),
        n=int(array.size),
        values=tuple(float(v) for v in array),
    )


@dataclass(frozen=True)
class PairedGain(Record):
    """Is a candidate faster than a reference beyond the round-to-round noise? Measured in the same
    rounds (interleaved), so each round gives one ratio candidate / reference of a higher-is-better
    figure (samples/s).

    ratios: per round. summary: their RatioSummary (median, low, high, spread). wins: rounds with a
    ratio > 1. p_value: one-sided paired t-test (scipy.stats.ttest_1samp on the log ratios, i.e. a
    paired t-test of log throughput) that the candidate is faster; None with fewer than 2 rounds. A
    t-test rather than Wilcoxon's signed-rank test: with the 3-5 rounds a diagnosis runs, the
    signed-rank test cannot reach p < 0.05 at all (its smallest one-sided p is 1 / 2**n).
    significant: p_value < alpha, the median ratio >= 1 + min_effect, and at least min_win_share of
    the rounds won; all three, so that a large but erratic gain and a steady but tiny one both fail.
    """

    ratios: tuple[float, ...]
    summary: RatioSummary
    wins: int
    p_value: float | None
    significant: bool
    alpha: float
    min_effect: float
    min_win_share: float

    @property
    def rounds(self) -> int:
        return self.summary.n


def paired_gain(*, candidate, reference, alpha: float = 0.05, min_effect: float = 0.10,
                min_win_share: float = 0.8) -> PairedGain:
    """Compare per-round figures (higher is better) of a candidate and a reference; see PairedGain."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a probability in (0, 1), found {alpha}")
    if min_effect < 0:
        raise ValueError(f"min_effect: expected a fraction >= 0, found {min_effect}")
    if not 0 < min_win_share <= 1:
        raise ValueError(f"min_win_share: expected a fraction in (0, 1], found {min_win_share}")
    ratios = ratio_of(candidate, reference)
    summary = ratio_summary(ratios)
    wins = sum(1 for r in ratios if r > 1)
    p_value = None
    if len(ratios) >= 2:
        logs = np.log(np.asarray(ratios))
        if np.ptp(logs) <= 1e-12 * max(1.0, float(np.max(np.abs(logs)))):  # no spread: the t statistic is undefined
            p_value = 0.0 if logs[0] > 0 else 1.0
        else:
            from scipy import stats as sps  # slow to import: only where a paired gain is tested

            p_value = float(sps.ttest_1samp(logs, 0.0, alternative="greater").pvalue)
    significant = bool(p_value is not None and p_value < alpha and summary.median >= 1 + min_effect
                       and wins >= min_win_share * len(ratios))
    return PairedGain(ratios=ratios, summary=summary, wins=wins, p_value=p_value, significant=significant,
                      alpha=alpha, min_effect=min_effect, min_win_share=min_win_share)


# ------------------------------------------------------------------------------------ proportions


def clopper_pearson(*, successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial confidence interval for successes / trials."""
    if not (isinstance(trials, int) and trials >= 1 and isinstance(successes, int) and 0 <= successes <= trials):
        raise ValueError(f"successes, trials: expected integers 0 ≤ successes ≤ trials, trials ≥ 1, "
                         f"found {successes}, {trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: expected a probability in (0, 1), found {confidence}")
    tail = (1 - confidence) / 2
    low = 0.0 if successes == 0 else float(spspecial.betaincinv(successes, trials - successes + 1, tail))
    high = 1.0 if successes == trials else float(spspecial.betaincinv(successes + 1, trials - successes, 1 - tail))
    return low, high


# ---------------------------------------------------------------------------------- input bound

# Thresholds of TensorFlow's profiler input-pipeline analyzer.
MODERATELY_INPUT_BOUND = 0.05
HIGHLY_INPUT_BOUND = 0.20


def input_bound_share(*, t_synthetic: float, t_real: float) -> float:
    """1 - t_synthetic / t_real: the share of step time spent waiting for input.

    Returned unclamped: a small negative value means the synthetic run was slower by noise, which is
    itself informative; classify_input_bound treats negatives as not input-bound.
    """
    if not (math.isfinite(t_real) and t_real > 0):
        raise ValueError(f"t_real: expected a positive time, found {t_real}")
    if not (math.isfinite(t_synthetic) and t_synthetic >= 0):
        raise ValueError(f"t_synthetic: expected a non-negative time, found {t_synthetic}")
    return 1.0 - t_synthetic / t_real


def classify_input_bound(share: float) -> str:
    """'not input-bound' (< 5 %), 'moderately input-bound' (5-20 %), 'highly input-bound' (>= 20 %)."""
    if math.isnan(share):
        raise ValueError("share: expected a number, found NaN")
    if share < MODERATELY_INPUT_BOUND:
        return "not input-bound"
    if share < HIGHLY_INPUT_BOUND:
        return "moderately input-bound"
    return "highly input-bound"


# ------------------------------------------------------------------------------- median interval


@dataclass(frozen=True)
class MedianInterval(Record):
    """A distribution-free confidence interval for the median of per-round values: the order statistics
    whose binomial coverage reaches ``confidence`` (or the whole range, with its lower coverage, when
    there are too few rounds). Rounds are the unit: each is one independent, interleaved measurement."""

    median: float
    low: float
    high: float
    coverage: float  # the interval's exact coverage under the binomial model
    n: int


def median_interval(values, *, confidence: float = 0.95) -> MedianInterval:
    """Order-statistic interval [x_(k), x_(n-k+1)] with the largest k whose coverage is >= confidence."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: expected a number in (0, 1), found {confidence!r}")
    ordered = np.sort(_as_array(values))
    n = ordered.size
    k = 1
    while k + 1 <= n // 2 and _order_coverage(n, k + 1) >= confidence:
        k += 1
    return MedianInterval(median=float(np.median(ordered)), low=float(ordered[k - 1]), high=float(ordered[n - k]),
                          coverage=_order_coverage(n, k), n=int(n))


def _order_coverage(n: int, k: int) -> float:
    """P(x_(k) <= median <= x_(n-k+1)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1)."""
    return 1 - 2 * _half_binomial_cdf(n)[k - 1]


def binomial_tail(successes: int, trials: int) -> float:
    """P(Binomial(trials, 1/2) >= successes): the one-sided sign test's p-value."""
    if successes <= 0:
        return 1.0
    if successes > trials:
        return 0.0
    return _half_binomial_cdf(trials)[trials - successes]  # symmetric: P(X >= s) = P(X <= n - s)


@functools.cache  # intervals and sign tests ask for the same few counts again and again
def _half_binomial_cdf(trials: int) -> tuple[float, ...]:
    """P(Binomial(trials, 1/2) <= j) for j = 0..trials, summed exactly in integers and rounded once
    (no scipy.stats, which is slow to import, in the plugin's and ab's processes)."""
    term, total, cumulative = 1, 0, []
    for j in range(trials + 1):
        total += term
        cumulative.append(total / 2 ** trials)
        term = term * (trials - j) // (j + 1)
    return tuple(cumulative)
