"""Is this run worse than the earlier runs of the same benchmark on the same hardware?

The sampling unit is the run. The per-batch times of one run are not independent samples of
run-to-run variation (they share the machine's state for minutes: CPU frequency, neighbours, page
cache), so a test on pooled per-batch times of two runs is wildly over-confident: it flags unchanged
code as a large, highly significant change (docs/comparison.md). Here each earlier run contributes one
figure (e.g. its median samples/s), and the current run's figure is judged against the spread of those.

Conventions:

* ``change`` is the relative change of *performance* against the history's centre; worse is
  negative. For a higher-is-better figure (samples/s) it is ``current / centre - 1``; for a
  lower-is-better figure (seconds) it is ``centre / current - 1``, so 25 % more time is a change of
  -0.2 (20 % less throughput). Rates and times of the same runs therefore give the same result.
* Figures are compared in log space: run-to-run noise is multiplicative, and a log-normal model
  makes the comparison scale-free and symmetric between rates and times.

numpy and scipy only; no pytest, no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from perfsuite.measure.stats import MAD_TO_STD, clopper_pearson
from perfsuite.records import Record

SLOWER = "slower"
FASTER = "faster"
NO_CHANGE = "no change"
NOT_JUDGED = "not judged"

# A change counts as "beyond noise" when it exceeds this many robust SDs of the history's log
# figures (the usual robust 3-sigma outlier rule). Informative only: the verdict uses the p-value.
NOISE_MULTIPLE = 3.0

# Below this SD of the log figures (a relative spread of 1e-12) the history is treated as constant:
# the t statistic is 0/0 there, and such a spread is floating-point rounding, not noise.
_ZERO_SPREAD = 1e-12


@dataclass(frozen=True)
class HistoryComparison(Record):
    """One benchmark's current run against its earlier runs (see compare_history).

    runs: earlier runs used (k). centre: their median figure (the median of the logs, so an even k
    takes the geometric mean of the two middle runs). change: performance change against centre,
    worse is negative (module docstring). interval_low / interval_high: the central 1 - 2*alpha
    prediction interval of change when nothing changed; the one-sided test at alpha flags a
    slowdown exactly when change < interval_low. p_worse / p_better: one-sided p-values for
    "worse / better than the history". log_sd: SD of the history's log figures (ddof=1), the noise
    the test uses. noise_cv: robust CV of the history (1.4826 * MAD of the log figures), the
    machine's run-to-run noise as reported to the user. beyond_noise: |log change| exceeds
    NOISE_MULTIPLE * noise_cv. Fields that need a history are None when the verdict is "not judged".
    """

    verdict: str
    reason: str
    runs: int
    current: float
    centre: float | None
    change: float | None
    interval_low: float | None
    interval_high: float | None
    p_worse: float | None
    p_better: float | None
    log_sd: float | None
    noise_cv: float | None
    beyond_noise: bool | None
    higher_is_better: bool
    min_effect: float
    alpha: float

    @property
    def judged(self) -> bool:
        return self.verdict != NOT_JUDGED


def _positive_figures(values, *, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of figures, found shape {array.shape}")
    bad = np.flatnonzero(~(np.isfinite(array) & (array > 0)))
    if bad.size:
        raise ValueError(f"{name}: expected positive finite figures, found {array[bad[0]]} at index {bad[0]}")
    return array


def _log_median(figures: np.ndarray) -> float:
    """The median; for an even count the geometric mean of the two middle figures, so that the
    median of 1 / figures is exactly 1 / the median (rates and times agree)."""
    ordered = np.sort(figures)
    middle = ordered.size // 2
    if ordered.size % 2:
        return float(ordered[middle])
    return math.sqrt(float(ordered[middle - 1]) * float(ordered[middle]))


def _check_parameters(*, min_effect: float, alpha: float, min_runs: int, max_runs: int | None) -> None:
    if not (math.isfinite(min_effect) and 0 <= min_effect < 1):
        raise ValueError(f"min_effect: expected a fraction in [0, 1), found {min_effect}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha: expected a probability in (0, 0.5), found {alpha}")
    if min_runs < 2:
        raise ValueError(f"min_runs: expected >= 2 (a spread needs two runs), found {min_runs}")
    if max_runs is not None and max_runs < min_runs:
        raise ValueError(f"max_runs: expected None or >= min_runs={min_runs}, found {max_runs}")


def _tail_p_values(difference: float, scale: float, df: int) -> tuple[float, float]:
    """(p_worse, p_better) of a log-performance difference with Student-t scale and df."""
    if scale <= _ZERO_SPREAD:  # a constant history: any real difference is certain, none is a coin flip
        if difference < -_ZERO_SPREAD:
            return 0.0, 1.0
        if difference > _ZERO_SPREAD:
            return 1.0, 0.0
        return 0.5, 0.5
    t = difference / scale
    return float(special.stdtr(df, t)), float(special.stdtr(df, -t))


def _verdict(*, change: float, p_worse: float, p_better: float, alpha: float, min_effect: float) -> str:
    if p_worse < alpha and change <= -min_effect:
        return SLOWER
    if p_better < alpha and change >= min_effect:
        return FASTER
    return NO_CHANGE


def _reason(verdict: str, *, change: float, p_worse: float, p_better: float, runs: int,
            noise_cv: float, alpha: float, min_effect: float) -> str:
    p = p_worse if change < 0 else p_better
    where = f"{change:+.1%} vs the median of {runs} earlier runs (run-to-run noise {noise_cv:.1%})"
    if verdict != NO_CHANGE:
        return f"{where}: p={p:.2g} < {alpha} and |change| >= {min_effect:.0%}"
    if p >= alpha:
        return f"{where}: within run-to-run noise, p={p:.2g} >= {alpha}"
    return f"{where}: p={p:.2g} < {alpha} but |change| < min_effect={min_effect:.0%}"


def _not_judged(*, runs: int, current: float, min_runs: int, higher_is_better: bool, min_effect: float,
                alpha: float) -> HistoryComparison:
    reason = (f"{runs} earlier run(s) on this hardware, {min_runs} needed: with fewer the machine's "
              f"run-to-run noise is unknown, so no p-value is honest")
    return HistoryComparison(
        verdict=NOT_JUDGED, reason=reason, runs=runs, current=current, centre=None, change=None,
        interval_low=None, interval_high=None, p_worse=None, p_better=None, log_sd=None, noise_cv=None,
        beyond_noise=None, higher_is_better=higher_is_better, min_effect=min_effect, alpha=alpha)


def compare_history(history: Sequence[float], current: float, *, higher_is_better: bool,
                    min_effect: float = 0.10, alpha: float = 0.05, min_runs: int = 3,
                    max_runs: int | None = 20) -> HistoryComparison:
    """Judge the current run's figure against the figures of earlier runs (oldest first).

    Only the newest max_runs earlier runs are used (None: all), so a machine that drifts over weeks
    is compared with its recent state. Fewer than min_runs give "not judged".

    Method: with x_1..x_k the log figures of the history and y the current one, under "nothing
    changed" (all k + 1 runs are draws of the same log-normal run-to-run noise)
        T = (y - mean(x)) / (sd(x) * sqrt(1 + 1/k))  ~  Student t, k - 1 degrees of freedom,
    exactly, whatever the noise level. p_worse is its one-sided tail towards worse performance.
    Why not a robust (median/MAD) variant: with k = 3..10 runs a robust scale has no exact reference
    distribution, and it is anti-conservative exactly where we live (with k = 3, two runs that happen
    to agree make MAD ~ 0 and any change "significant"). With the t statistic an outlying earlier run
    only inflates sd: it costs power, never adds false alarms. The robust CV is still reported as
    the machine's noise, where an outlier should not dominate the description.

    verdict: "slower" when p_worse < alpha and change <= -min_effect; "faster" symmetrically; else
    "no change". This is the verdict for one benchmark alone; with several benchmarks per run use
    decide_history(), which adjusts for multiplicity.
    """
    _check_parameters(min_effect=min_effect, alpha=alpha, min_runs=min_runs, max_runs=max_runs)
    figures = _positive_figures(history, name="history")
    current = float(_positive_figures([current], name="current")[0])
    if max_runs is not None:
        figures = figures[-max_runs:]
    runs = int(figures.size)
    if runs < min_runs:
        return _not_judged(runs=runs, current=current, min_runs=min_runs, higher_is_better=higher_is_better,
                           min_effect=min_effect, alpha=alpha)

    centre_figure = _log_median(figures)
    sign = 1.0 if higher_is_better else -1.0  # log performance: higher is better in both directions
    logs = sign * np.log(figures)
    now = sign * math.log(current)
    centre = sign * math.log(centre_figure)
    mean = float(np.mean(logs))
    log_sd = float(np.std(logs, ddof=1))
    scale = log_sd * math.sqrt(1 + 1 / runs)
    p_worse, p_better = _tail_p_values(now - mean, scale, runs - 1)
    quantile = float(special.stdtrit(runs - 1, 1 - alpha))
    change = (current / centre_figure if higher_is_better else centre_figure / current) - 1.0
    noise_cv = MAD_TO_STD * float(np.median(np.abs(logs - centre)))
    verdict = _verdict(change=change, p_worse=p_worse, p_better=p_better, alpha=alpha, min_effect=min_effect)
    return HistoryComparison(
        verdict=verdict,
        reason=_reason(verdict, change=change, p_worse=p_worse, p_better=p_better, runs=runs, noise_cv=noise_cv,
                       alpha=alpha, min_effect=min_effect),
        runs=runs, current=current, centre=centre_figure, change=change,
        interval_low=math.expm1(mean - quantile * scale - centre),
        interval_high=math.expm1(mean + quantile * scale - centre),
        p_worse=p_worse, p_better=p_better, log_sd=log_sd, noise_cv=noise_cv,
        beyond_noise=bool(abs(now - centre) > NOISE_MULTIPLE * noise_cv),
        higher_is_better=higher_is_better, min_effect=min_effect, alpha=alpha)


# ---------------------------------------------------------------------------------- multiplicity


def holm(p_values: Sequence[float]) -> tuple[float, ...]:
    """Holm step-down adjusted p-values, in the input order.

    The i-th smallest raw p (1-based) becomes max over j <= i of min(1, (m - j + 1) * p_(j)): at
    least the raw p, monotone in the raw order, at most 1. Rejecting adjusted p < alpha controls the
    family-wise error rate (the chance of even one false alarm) at alpha under any dependence.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"p_values: expected a 1-D sequence, found shape {p.shape}")
    if not np.all((p >= 0) & (p <= 1)):  # also rejects NaN
        bad = int(np.flatnonzero(~((p >= 0) & (p <= 1)))[0])
        raise ValueError(f"p_values: expected probabilities in [0, 1], found {p[bad]} at index {bad}")
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return tuple(float(v) for v in adjusted)


@dataclass(frozen=True)
class Decision(Record):
    """One benchmark's verdict within a run of several (see decide_history).

    adjusted_p_worse / adjusted_p_better: Holm-adjusted over the judged benchmarks of the run (None
    when not judged). significant_slowdown: the alarm that should fail the user's CI.
    """

    verdict: str
    significant_slowdown: bool
    adjusted_p_worse: float | None
    adjusted_p_better: float | None
    comparison: HistoryComparison


def decide_history(comparisons: Sequence[HistoryComparison], *, alpha: float = 0.05) -> tuple[Decision, ...]:
    """Verdicts for all benchmarks compared in one run, in the input order.

    A benchmark is a significant slowdown only when its Holm-adjusted p_worse < alpha AND its change
    is a worsening of at least its own min_effect; "faster" is decided the same way on p_better
    (a separate family: it is reported, never an alarm). Not-judged benchmarks pass through and do
    not count in m. Each comparison's own alpha is ignored here.

    Why Holm: one false alarm fails the user's CI, so the error to control is the family-wise rate
    (P(any false alarm) <= alpha), not the per-benchmark rate: with 20 benchmarks at 5 % each, an
    unchanged run would fail 64 % of the time. Holm controls FWER under any dependence between
    benchmarks (they share the machine) and is uniformly more powerful than Bonferroni; FDR methods
    (Benjamini-Hochberg) would allow false alarms in proportion, which a pass/fail gate cannot.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a probability in (0, 1), found {alpha}")
    judged = [i for i, c in enumerate(comparisons) if c.judged]
    worse = dict(zip(judged, holm([comparisons[i].p_worse for i in judged]), strict=True))
    better = dict(zip(judged, holm([comparisons[i].p_better for i in judged]), strict=True))
    decisions = []
    for i, comparison in enumerate(comparisons):
        if i not in worse:
            decisions.append(Decision(verdict=NOT_JUDGED, significant_slowdown=False, adjusted_p_worse=None,
                                      adjusted_p_better=None, comparison=comparison))
            continue
        verdict = _verdict(change=comparison.change, p_worse=worse[i], p_better=better[i], alpha=alpha,
                           min_effect=comparison.min_effect)
        decisions.append(Decision(verdict=verdict, significant_slowdown=verdict == SLOWER,
                                  adjusted_p_worse=worse[i], adjusted_p_better=better[i], comparison=comparison))
    return tuple(decisions)


# ------------------------------------------------------------------------------------ simulation


@dataclass(frozen=True)
class RateEstimate(Record):
    """flagged of trials, the rate and its 95 % Clopper-Pearson interval."""

    flagged: int
    trials: int
    rate: float
    ci_low: float
    ci_high: float


def _rate(flagged: int, trials: int) -> RateEstimate:
    low, high = clopper_pearson(successes=int(flagged), trials=int(trials))
    return RateEstimate(flagged=int(flagged), trials=int(trials), rate=flagged / trials, ci_low=low, ci_high=high)


@dataclass(frozen=True)
class SimulatedRates(Record):
    """Result of simulate_rates.

    false_alarm: share of benchmark verdicts flagged as slowdowns in A/A runs. run_false_alarm: share
    of A/A runs with at least one flag (what fails CI; Holm keeps it <= alpha). detection: per planted
    slowdown, the share of runs in which the one slowed benchmark was flagged.
    """

    noise_cv: float
    history_runs: int
    benchmarks: int
    trials: int
    alpha: float
    min_effect: float
    seed: int
    false_alarm: RateEstimate
    run_false_alarm: RateEstimate
    detection: tuple[tuple[float, RateEstimate], ...]


def _compare_all(history: np.ndarray, current: np.ndarray, *, alpha: float,
                 min_effect: float) -> list[HistoryComparison]:
    return [compare_history(h, c, higher_is_better=True, min_effect=min_effect, alpha=alpha)
            for h, c in zip(history, current, strict=True)]


def _flags(comparisons: list[HistoryComparison], *, alpha: float) -> np.ndarray:
    return np.array([d.significant_slowdown for d in decide_history(comparisons, alpha=alpha)])


def simulate_rates(*, noise_cv: float, history_runs: int, benchmarks: int = 20, trials: int = 500,
                   slowdowns: Sequence[float] = (0.10, 0.25), alpha: float = 0.05, min_effect: float = 0.10,
                   seed: int = 0) -> SimulatedRates:
    """False-alarm and detection rates of compare_history + decide_history on synthetic histories.

    Each trial is one run of `benchmarks` benchmarks, each with `history_runs` earlier runs; every
    figure (samples/s) is an independent log-normal draw with coefficient of variation noise_cv.
    A/A: the current run is unchanged. Planted slowdown s: the same trial with one benchmark's
    current figure multiplied by (1 - s), i.e. change = -s, the others unchanged; one regressed
    benchmark among unchanged ones is the hard case for Holm (it must pass alpha / m alone). A
    slowdown equal to min_effect passes the effect gate only about half the time, by design.
    Seeded: the same arguments give the same result.
    """
    if not (noise_cv > 0 and history_runs >= 1 and benchmarks >= 1 and trials >= 1):
        raise ValueError("noise_cv, history_runs, benchmarks, trials: expected positive values, found "
                         f"{noise_cv}, {history_runs}, {benchmarks}, {trials}")
    rng = np.random.default_rng(seed)
    sigma = math.sqrt(math.log1p(noise_cv**2))  # log-SD of a log-normal with this CV
    flagged = runs_flagged = 0
    detected = [0] * len(slowdowns)
    for _ in range(trials):
        figures = np.exp(sigma * rng.standard_normal((benchmarks, history_runs + 1)))
        history, current = figures[:, :-1], figures[:, -1]
        comparisons = _compare_all(history, current, alpha=alpha, min_effect=min_effect)
        aa = _flags(comparisons, alpha=alpha)
        flagged += int(aa.sum())
        runs_flagged += bool(aa.any())
        for i, slowdown in enumerate(slowdowns):
            planted = _compare_all(history[:1], current[:1] * (1 - slowdown), alpha=alpha, min_effect=min_effect)
            detected[i] += bool(_flags(planted + comparisons[1:], alpha=alpha)[0])
    return SimulatedRates(
        noise_cv=noise_cv, history_runs=history_runs, benchmarks=benchmarks, trials=trials, alpha=alpha,
        min_effect=min_effect, seed=seed, false_alarm=_rate(flagged, trials * benchmarks),
        run_false_alarm=_rate(runs_flagged, trials),
        detection=tuple((float(s), _rate(d, trials)) for s, d in zip(slowdowns, detected, strict=True)))
