"""Is revision B slower than revision A? The decision of ``perfsuite ab`` from paired rounds.

Both revisions run on the same machine in the same job, one round of A and one of B after another
(A B, B A, ...), so each pair of rounds gives one log ratio log(B/A) of a higher-is-better figure
(samples/s, or a same-run ratio) in which the load both rounds shared cancels. Per benchmark:

* change: exp(median log ratio) - 1, the relative change of B's figure against A's (worse is
  negative). Interval: the order-statistic interval of that median (the sign test's dual, no
  distribution assumed) at ``interval_confidence``.
* p_slower / p_faster: one-sided exact sign tests on the log ratios (a disturbed round costs one
  sign, not a large rank, so bursts of other load do not hide a change), multiplied by the number of
  looks the adaptive run may take (a Bonferroni bound over the looks: stopping when a test first
  succeeds would otherwise inflate the false-alarm rate), then Holm-adjusted over the benchmarks.
* min_effect: max(floor, k * 1.2533 * noise / sqrt(n)), k standard errors of the median change,
  where noise is the robust SD (1.4826 * MAD) of the log ratios, i.e. the A/A noise of the pair: a
  shift of every ratio leaves it unchanged. A change must exceed it to count.

Passes. The rounds of one pair of worker processes are not independent of that pair: a fresh process
can keep a speed of its own for its whole life, and on some machines falls into a slow mode now and
then (docs/ab.md, "Where the noise lives"); a round-level test reads such a difference as a change.
So the comparison runs in passes (fresh workers each), and with two or more the pass is the unit
(``estimate_passes``): each pass's median log ratio; over the passes their trimmed mean (``trim`` of
them cut at each end), Yuen's interval and two-sided test (the winsorised spread, a Student t with the
trimmed count's degrees of freedom). A process in a slow mode makes an outlying pass on one side or the
other, which the trim drops: it can neither fake a change nor, as it would a mean's spread, hide one.
Sequential: a benchmark still undecided gets more passes, looked at after ``passes`` and then every
time the count grows by half (``pass_looks``, up to ``max_passes``), each look paid for by Bonferroni;
one never decided is "undecided", a verdict of its own, never "no change".

Second signal. Where the worker reports it, each round's process CPU time per sample: "more work"
raises it on one side, in every process of that side alike, also where spare cores hide it from the
wall time. It is tested over the passes as the wall time is (``cpu_estimate``), as a hypothesis of its
own in the Holm family, and a significant rise beyond min_effect is a slowdown ("slower (CPU per
sample)") unless the wall time is significantly faster. A process waiting busily for a core raises it
in that process only, whichever side: processes that stand out from their own side by more than the
run's own scatter of processes allows (``slow_processes``, calibrated per run), on BOTH sides, mean a
busy machine (``machine_busy``): no slower / faster is claimed there ("undecided: machine busy").

Verdicts: "slower" / "faster": significant (Holm-adjusted p < alpha) and beyond min_effect;
"no change": the interval lies within +-no_change_within (an equivalence claim: no change that
large); "undecided" otherwise, with what would decide it.

numpy and scipy only; no processes, no pytest, no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
from scipy import special

from perfsuite.measure.stats import MAD_TO_STD, binomial_tail, median_interval
from perfsuite.records import Record
from perfsuite.verdict.comparison import holm

SLOWER = "slower"
FASTER = "faster"
NO_CHANGE = "no change"
UNDECIDED = "undecided"

MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # 1.2533: standard error of a median / (sigma / sqrt(n))


@dataclass(frozen=True)
class ABSettings(Record):
    """How ``perfsuite ab`` decides. Rounds count pairs (one round of A and one of B).

    alpha: family-wise false-alarm rate over the benchmarks compared. min_effect: the floor of the
    smallest change that counts. noise_multiple: k in min_effect. no_change_within: the equivalence
    margin of "no change". equivalence_alpha: one-sided level of each end of that claim. Rounds are
    even (as many A-first as B-first pairs); decisions are looked at after min_rounds, then at every
    doubling, at max_rounds and once more when the budget stops a benchmark. passes: fresh pairs of
    workers every benchmark gets; max_passes: at most, for a benchmark still undecided (looked at after
    passes, then each time the count grows by half, and at max_passes). With one pass there are no more.
    trim: the share of passes cut at each end of the trimmed mean (Yuen). busy_cpu_excess: the least a
    process's CPU time per sample must stand out from its side to count as one in a slow state;
    busy_spread_multiple: and by at least this many of the run's own robust SDs of processes
    (``slow_processes``).
    """

    alpha: float = 0.01
    min_effect: float = 0.02
    noise_multiple: float = 3.0
    no_change_within: float = 0.05
    equivalence_alpha: float = 0.05
    min_rounds: int = 12
    max_rounds: int = 96
    passes: int = 6
    max_passes: int = 24
    trim: float = 0.2
    busy_cpu_excess: float = 0.20
    busy_spread_multiple: float = 4.0

    DERIVED: ClassVar[tuple[str, ...]] = ("looks", "interval_confidence", "pass_looks")

    def __post_init__(self):
        for name in ("alpha", "equivalence_alpha", "min_effect", "no_change_within", "busy_cpu_excess"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name}: expected a number between 0 and 1, found {value}")
        for name in ("noise_multiple", "busy_spread_multiple"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a positive number, found {getattr(self, name)}")
        if not 0 <= self.trim < 0.5:
            raise ValueError(f"trim: expected a share in [0, 0.5), found {self.trim}")
        if not (self.min_rounds >= 4 and self.min_rounds % 2 == 0):
            raise ValueError(f"min_rounds: expected an even number >= 4, found {self.min_rounds}")
        if not (isinstance(self.passes, int) and self.passes >= 1):
            raise ValueError(f"passes: expected an integer >= 1, found {self.passes!r}")
        if not (isinstance(self.max_passes, int) and self.max_passes >= self.passes):
            raise ValueError(f"max_passes: expected an integer >= passes ({self.passes}), found {self.max_passes!r}")
        if not (self.max_rounds >= self.min_rounds and self.max_rounds % 2 == 0):
            raise ValueError(f"max_rounds: expected an even number >= min_rounds ({self.min_rounds}), "
                             f"found {self.max_rounds}")

    @property
    def looks(self) -> tuple[int, ...]:
        """Round counts at which a benchmark may stop because it is decided."""
        counts, n = [], self.min_rounds
        while n < self.max_rounds:
            counts.append(n)
            n *= 2
        return (*counts, self.max_rounds)

    @property
    def pass_looks(self) -> tuple[int, ...]:
        """Pass counts at which a benchmark may stop taking passes because it is decided: passes, then
        each time the count grows by half, and max_passes."""
        if self.passes == 1:
            return (1,)
        counts, n = [], self.passes
        while n < self.max_passes:
            counts.append(n)
            n = math.ceil(n * 1.5)
        return (*counts, self.max_passes)

    @property
    def look_count(self) -> int:
        """Looks a benchmark may take: the scheduled ones plus one where the budget stops it."""
        return len(self.looks) + 1

    @property
    def interval_confidence(self) -> float:
        """Two-sided confidence of the change's interval, corrected for the looks."""
        return 1 - 2 * self.equivalence_alpha / self.look_count

    def confidence(self, passes: int) -> float:
        """The interval's confidence for an estimate over its rounds or over passes, each corrected for
        its looks (1 - 2 * equivalence_alpha where passes are fixed: passes == max_passes)."""
        if passes == 1:
            return self.interval_confidence
        return 1 - 2 * self.equivalence_alpha / len(self.pass_looks)


@dataclass(frozen=True)
class Paired:
    """One benchmark's rounds: A's and B's figure of each pair, in round order."""

    name: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    higher_is_better: bool = True

    def __post_init__(self):
        if len(self.a) != len(self.b):
            raise ValueError(f"{self.name}: expected as many rounds of B as of A, found {len(self.b)} and {len(self.a)}")
        for side, values in (("A", self.a), ("B", self.b)):
            figures = np.asarray(values, dtype=float)
            bad = figures[~(np.isfinite(figures) & (figures > 0))]
            if bad.size:
                raise ValueError(f"{self.name}: expected positive figures from side {side}, found {bad[0]}")

    def log_changes(self) -> np.ndarray:
        """log(B/A) per round, oriented so that worse is negative."""
        logs = np.log(np.asarray(self.b, dtype=float)) - np.log(np.asarray(self.a, dtype=float))
        return logs if self.higher_is_better else -logs


@dataclass(frozen=True)
class Estimate(Record):
    """One benchmark's statistics before the correction across benchmarks (see the module notes).

    change / low / high: relative change of B against A and its interval (coverage: its exact
    coverage, below interval_confidence when there are too few rounds). noise: robust SD of the log
    ratios (of one pass), or the SD of the passes' median log ratios. p_slower / p_faster: one-sided
    sign tests multiplied by the look count (capped at 1), or trimmed t-tests over the passes.
    worse_rounds / better_rounds: rounds with B worse / better. passes: the unit when >= 2. The CPU
    figures: B's CPU time per sample against A's, tested over the passes as the change is.
    """

    name: str
    rounds: int
    change: float
    low: float
    high: float
    coverage: float
    noise: float
    min_effect: float
    p_slower: float
    p_faster: float
    worse_rounds: int
    better_rounds: int
    passes: int = 1
    cpu_change: float | None = None  # CPU time per sample, B against A (positive: B spends more); None: not reported
    slow_processes: tuple[int, int] = (0, 0)  # processes of side A, side B in a slow state (machine_busy)
    trimmed: int = 0  # passes cut at each end of the trimmed mean
    cpu_low: float | None = None  # the CPU change's interval, and its p of a rise (over passes; else None)
    cpu_high: float | None = None
    p_cpu_more: float = 1.0
    cpu_min_effect: float | None = None

    DERIVED: ClassVar[tuple[str, ...]] = ("busy",)

    @property
    def busy(self) -> bool:
        """The machine was busy: processes in a slow state on both sides, more than the trim drops (see
        ``machine_busy``)."""
        return machine_busy(self.slow_processes, self.trimmed)


def sign_test(successes: int, trials: int) -> float:
    """P(at least ``successes`` of ``trials`` fair coin flips): the one-sided exact sign test."""
    return binomial_tail(successes, trials)


Cpu = Sequence[tuple[Sequence[float], Sequence[float]]]  # per pass: A's and B's CPU seconds per sample per round


def _cpu_logs(cpu: Cpu) -> np.ndarray | None:
    """Per pass, log(median B / median A) of the CPU seconds per sample (positive: B spends more); None
    when a pass lacks the figures."""
    if not cpu or any(not a or not b for a, b in cpu):
        return None
    return np.array([math.log(np.median(b) / np.median(a)) for a, b in cpu])


def cpu_change(cpu: Cpu) -> float | None:
    """B's CPU time per sample against A's over the passes (their trimmed mean of ``_cpu_logs``, exp - 1;
    the mean for fewer than 5); None when a pass lacks the figures."""
    logs = _cpu_logs(cpu)
    return None if logs is None else math.expm1(trimmed(logs, 0.2).mean)


def slow_processes(cpu: Cpu, settings: ABSettings) -> tuple[int, int]:
    """Per side, the processes (passes) in a slow state: their median CPU time per sample lies above their
    side's median process by more than busy_cpu_excess AND by more than busy_spread_multiple robust SDs
    of the run's own processes about their side's median (both sides pooled: the run's A/A-like
    scatter), while the other side's process of that pass does not. Processes of the same code doing
    the same work, of which one spends far more CPU per sample than the run's scatter allows, are
    waiting busily, not working more. A change of the code moves every process of its side alike, so
    it is not counted; nor is a pass whose two processes were both slow (a disturbance they shared)."""
    if len(cpu) < 3 or _cpu_logs(cpu) is None:
        return (0, 0)
    logs = [np.log([float(np.median(pass_[side])) for pass_ in cpu]) for side in (0, 1)]
    deviations = [side - np.median(side) for side in logs]
    pooled = np.concatenate(deviations)
    spread = MAD_TO_STD * float(np.median(np.abs(pooled - np.median(pooled))))
    limit = max(math.log1p(settings.busy_cpu_excess), settings.busy_spread_multiple * spread)
    slow = [d > limit for d in deviations]
    return int(np.sum(slow[0] & ~slow[1])), int(np.sum(slow[1] & ~slow[0]))


def machine_busy(slow: tuple[int, int], cut: int = 0) -> bool:
    """The rule of "undecided: machine busy": slow-state processes on BOTH sides, more on one side than
    the trimmed mean cuts at each end (``cut``). A real "more work" change raises CPU per sample on one
    side only, in all its processes alike (so none stands out within its side); waiting raises it in
    some processes of either side whatever the code. Slow processes the trim drops cannot move the
    change, so they are left to the trimmed test over the passes."""
    return slow[0] > 0 and slow[1] > 0 and max(slow) > cut


@dataclass(frozen=True)
class Trimmed:
    """Yuen's trimmed mean of values: mean, standard error (winsorised SD / ((1 - 2g/n) sqrt n)) and
    degrees of freedom (n - 2g - 1), g values cut at each end."""

    mean: float
    standard_error: float
    df: int
    cut: int


def trimmed(values: np.ndarray, share: float) -> Trimmed:
    """Yuen's trimmed mean of ``values`` with floor(share * n) cut at each end (none below 5 values, where
    a cut would leave too few to judge a spread); scipy's trim_mean and winsorize do the cutting."""
    from scipy import stats
    from scipy.stats import mstats

    values = np.asarray(values, dtype=float)
    n = values.size
    cut = math.floor(share * n) if n >= 5 else 0
    kept = n - 2 * cut
    mean = float(stats.trim_mean(values, cut / n)) if cut else float(np.mean(values))
    winsorised = np.asarray(mstats.winsorize(values, limits=(cut / n, cut / n))) if cut else values
    spread = float(np.std(winsorised, ddof=1)) if n > 1 else 0.0
    return Trimmed(mean, spread / ((kept / n) * math.sqrt(n)), max(kept - 1, 1), cut)


def _pass_logs(paired: Paired) -> np.ndarray:
    """The rounds' log changes (``Paired.log_changes``), at least two of them."""
    logs = paired.log_changes()
    if logs.size < 2:
        raise ValueError(f"{paired.name}: expected at least 2 rounds, found {logs.size}")
    return logs


def estimate(paired: Paired, settings: ABSettings, cpu: Cpu = ()) -> Estimate:
    """The change, its interval, the noise, the minimum effect and the look-corrected p-values; with
    ``cpu`` (one pass's CPU time per sample of A and B), its change as a second signal."""
    logs = _pass_logs(paired)
    interval = median_interval(logs, confidence=settings.interval_confidence)
    noise = MAD_TO_STD * float(np.median(np.abs(logs - np.median(logs))))
    standard_error = MEDIAN_SE_FACTOR * noise / math.sqrt(logs.size)
    worse, better = int(np.sum(logs < 0)), int(np.sum(logs > 0))
    looks = settings.look_count
    return Estimate(
        name=paired.name, rounds=int(logs.size), change=math.expm1(float(np.median(logs))),
        low=math.expm1(interval.low), high=math.expm1(interval.high), coverage=interval.coverage, noise=noise,
        min_effect=max(settings.min_effect, settings.noise_multiple * standard_error),
        p_slower=min(1.0, looks * sign_test(worse, worse + better)),
        p_faster=min(1.0, looks * sign_test(better, worse + better)),
        worse_rounds=worse, better_rounds=better, cpu_change=cpu_change(cpu))


def estimate_passes(passes: Sequence[Paired], settings: ABSettings, cpu: Cpu = ()) -> Estimate:
    """The change over independent passes (fresh processes each): Yuen's trimmed mean of the passes'
    median log ratios (``trimmed``), its interval at settings.confidence(passes) and t-tests on the
    trimmed count's degrees of freedom, each direction at alpha / 2 (its one-sided p doubled, then
    multiplied by the pass looks), so that slower and faster together stay within alpha. The standard
    error is the passes' spread alone: each pass median carries its rounds' noise, so the spread holds
    it. With ``cpu`` (per pass), the CPU change tested the same way and each side's slow-state
    processes (``slow_processes``)."""
    if len(passes) < 2:
        raise ValueError(f"expected at least 2 passes, found {len(passes)}")
    per_pass = [_pass_logs(paired) for paired in passes]
    medians = np.array([float(np.median(logs)) for logs in per_pass])
    wall = trimmed(medians, settings.trim)
    confidence = settings.confidence(medians.size)
    low, high, p_slower, p_faster = _yuen(wall, confidence, tails=2 * len(settings.pass_looks))
    cpu_logs = _cpu_logs(cpu)
    cpu_figures = {}
    if cpu_logs is not None and cpu_logs.size == medians.size:
        spent = trimmed(cpu_logs, settings.trim)
        cpu_low, cpu_high, _, p_more = _yuen(spent, confidence, tails=2 * len(settings.pass_looks))
        cpu_figures = {"cpu_change": math.expm1(spent.mean), "cpu_low": math.expm1(cpu_low),
                       "cpu_high": math.expm1(cpu_high), "p_cpu_more": p_more,
                       "cpu_min_effect": max(settings.min_effect, settings.noise_multiple * spent.standard_error)}
    return Estimate(
        name=passes[0].name, rounds=sum(logs.size for logs in per_pass), change=math.expm1(wall.mean),
        low=math.expm1(low), high=math.expm1(high), coverage=confidence,
        noise=wall.standard_error * math.sqrt(medians.size),
        min_effect=max(settings.min_effect, settings.noise_multiple * wall.standard_error),
        p_slower=p_slower, p_faster=p_faster,
        worse_rounds=sum(int(np.sum(logs < 0)) for logs in per_pass),
        better_rounds=sum(int(np.sum(logs > 0)) for logs in per_pass),
        passes=medians.size, trimmed=wall.cut, slow_processes=slow_processes(cpu, settings), **cpu_figures)


def _yuen(t: Trimmed, confidence: float, *, tails: int) -> tuple[float, float, float, float]:
    """A trimmed mean's interval (log scale) at ``confidence`` and its one-sided p-values (below zero,
    above zero), each multiplied by ``tails`` and capped at 1."""
    half = float(special.stdtrit(t.df, (1 + confidence) / 2)) * t.standard_error
    score = t.mean / t.standard_error if t.standard_error > 0 else math.copysign(math.inf, t.mean) if t.mean else 0.0
    return (t.mean - half, t.mean + half, min(1.0, tails * float(special.stdtr(t.df, score))),
            min(1.0, tails * float(special.stdtr(t.df, -score))))


def verdict_of(e: Estimate, *, p_slower: float, p_faster: float, settings: ABSettings, p_cpu_more: float = 1.0) -> str:
    """slower / faster / no change / undecided from an estimate and its family-adjusted p-values; on a
    busy machine (``machine_busy``) never slower or faster: which side's processes happened to wait
    decides the change there, not the code. A significant rise of CPU per sample beyond its minimum
    effect is a slowdown the wall time may hide, unless the wall time is significantly faster."""
    if e.busy:
        return NO_CHANGE if verdict_of(replace(e, slow_processes=(0, 0)), p_slower=p_slower, p_faster=p_faster,
                                       settings=settings) == NO_CHANGE else UNDECIDED
    faster = p_faster < settings.alpha and e.change >= e.min_effect
    if p_slower < settings.alpha and e.change <= -e.min_effect:
        return SLOWER
    if faster:
        return FASTER
    if cpu_rose(e, p_cpu_more, settings):
        return SLOWER
    margin = settings.no_change_within
    if e.coverage >= settings.confidence(e.passes) and -margin < e.low and e.high < margin:
        return NO_CHANGE
    return UNDECIDED


def cpu_rose(e: Estimate, p_cpu_more: float, settings: ABSettings) -> bool:
    """B spends significantly more CPU per sample than A, beyond the CPU figure's minimum effect."""
    return (e.cpu_min_effect is not None and e.cpu_change is not None and p_cpu_more < settings.alpha
            and e.cpu_change >= e.cpu_min_effect)


def more_rounds(e: Estimate, settings: ABSettings, *, benchmarks: int = 1) -> int | None:
    """About how many more rounds an undecided benchmark needs to be decided at its present change
    and noise (the interval narrows as 1/sqrt(n)); None when no number of rounds is expected to do
    it (a change right at the no-change margin, below the minimum effect), and for a decision over
    passes, where more rounds cannot remove a difference between processes (more passes can)."""
    if e.passes > 1:
        return None
    n, shift = e.rounds, abs(math.log1p(e.change))
    spread = MEDIAN_SE_FACTOR * e.noise  # standard error of the median log ratio, times sqrt(n)
    needed = []
    margin = math.log1p(settings.no_change_within)
    if shift < margin:  # towards "no change"; the interval needs rounds enough to reach its coverage
        z = -special.ndtri(settings.equivalence_alpha / settings.look_count)  # the normal's upper quantile
        fewest = 1 + math.log2(1 / (1 - settings.interval_confidence))
        needed.append(max(fewest, (z * spread / (margin - shift)) ** 2))
    if shift >= math.log1p(settings.min_effect) and shift > 0:  # towards significance beyond min_effect
        level = settings.alpha / (settings.look_count * max(benchmarks, 1))
        fewest = math.log2(1 / level)  # the sign test's smallest p is 2**-n
        z = -special.ndtri(level)
        needed.append(max(fewest, (max(z, settings.noise_multiple) * spread / shift) ** 2))
    if not needed:
        return None
    extra = math.ceil(min(needed)) - n
    return max(2, extra + extra % 2)  # rounds come in pairs of orders


@dataclass(frozen=True)
class ABVerdict(Record):
    """One benchmark's verdict within the run. p_slower / p_faster: look- and Holm-adjusted.
    more_rounds: for an undecided verdict, the estimate of rounds still needed (None: unknown)."""

    name: str
    verdict: str
    estimate: Estimate
    p_slower: float
    p_faster: float
    more_rounds: int | None
    p_cpu_more: float = 1.0  # Holm-adjusted p of a rise of CPU per sample (1: not tested)
    by_cpu: bool = False  # slower by its CPU per sample, the wall time not showing it

    @property
    def significant_slowdown(self) -> bool:
        return self.verdict == SLOWER

    @property
    def p(self) -> float:
        """The adjusted p-value in the direction of the change."""
        return self.p_slower if self.estimate.change < 0 else self.p_faster

    def label(self) -> str:
        e = self.estimate
        if self.verdict == SLOWER and self.by_cpu:
            return f"slower (CPU per sample {e.cpu_change:+.1%} [{e.cpu_low:+.1%}, {e.cpu_high:+.1%}])"
        if self.verdict != UNDECIDED:
            return self.verdict
        if e.busy:
            a, b = e.slow_processes
            return f"undecided: machine busy (slow state in {a} process(es) of A, {b} of B)"
        if e.passes > 1:
            return f"undecided (over {e.passes} passes; more passes or a longer --budget would narrow it)"
        if self.more_rounds is None:
            return "undecided (change near the no-change margin)"
        return f"undecided (needs ~{self.more_rounds} more rounds)"

    def as_dict(self) -> dict:
        """The flat form the ab JSON holds: the verdict's keys, its label and significant_slowdown, then
        the estimate's (its own p-values as raw_p_slower, raw_p_faster); nested_verdict reads it back."""
        return {"name": self.name, "verdict": self.verdict, "label": self.label(),
                "significant_slowdown": self.significant_slowdown, "p_slower": self.p_slower,
                "p_faster": self.p_faster, "more_rounds": self.more_rounds, "p_cpu_more": self.p_cpu_more,
                "by_cpu": self.by_cpu, **{
                    k: v for k, v in self.estimate.as_dict().items()
                    if k not in ("name", "p_slower", "p_faster", "p_cpu_more")},
                "raw_p_slower": self.estimate.p_slower, "raw_p_faster": self.estimate.p_faster,
                "raw_p_cpu_more": self.estimate.p_cpu_more}


_VERDICT_KEYS = ("name", "verdict", "p_slower", "p_faster", "more_rounds", "p_cpu_more", "by_cpu")
_RAW_P = {"raw_p_slower": "p_slower", "raw_p_faster": "p_faster", "raw_p_cpu_more": "p_cpu_more"}


def nested_verdict(flat: dict) -> dict:
    """ABVerdict.as_dict()'s flat form as the record's fields (the estimate nested); a missing key is
    left for the validator to name, any other goes to the estimate."""
    own = {k: flat[k] for k in _VERDICT_KEYS if k in flat}
    estimate = {_RAW_P.get(k, k): v for k, v in flat.items()
                if k not in (*_VERDICT_KEYS, "label", "significant_slowdown")}
    if "name" in flat:
        estimate["name"] = flat["name"]
    return {**own, "estimate": estimate}


def decide_revisions(estimates: Sequence[Estimate], settings: ABSettings) -> tuple[ABVerdict, ...]:
    """Verdicts for every benchmark compared in one run, in the input order: Holm over the benchmarks,
    slowdowns and speed-ups as separate families (as perfsuite.verdict.comparison.decide_history); a
    rise of CPU per sample is a slowdown hypothesis of its own in the slowdown family."""
    if not estimates:
        return ()
    count = len(estimates)
    slower_family = holm([e.p_slower for e in estimates] + [e.p_cpu_more for e in estimates])
    slower, cpu_more = slower_family[:count], slower_family[count:]
    faster = holm([e.p_faster for e in estimates])
    verdicts = []
    for e, p_slower, p_faster, p_cpu in zip(estimates, slower, faster, cpu_more, strict=True):
        verdict = verdict_of(e, p_slower=p_slower, p_faster=p_faster, settings=settings, p_cpu_more=p_cpu)
        extra = more_rounds(e, settings, benchmarks=count) if verdict == UNDECIDED else None
        by_cpu = verdict == SLOWER and not (p_slower < settings.alpha and e.change <= -e.min_effect)
        verdicts.append(ABVerdict(e.name, verdict, e, p_slower, p_faster, extra, p_cpu, by_cpu))
    return tuple(verdicts)


def settled(paired: Paired, settings: ABSettings, *, benchmarks: int) -> bool:
    """Whether a benchmark may stop taking rounds: at one of its looks, decided on its own (see
    ``_decided_alone``)."""
    return len(paired.a) in settings.looks and _decided_alone(estimate(paired, settings), settings, benchmarks)


def passes_settled(passes: Sequence[Paired], settings: ABSettings, *, benchmarks: int, cpu: Cpu = ()) -> bool:
    """Whether a benchmark needs no more passes: at max_passes, or at one of its pass looks and decided
    on its own (as ``settled`` for rounds) or judged busy. One pass is settled."""
    n = len(passes)
    if n >= settings.max_passes or settings.passes == 1:
        return True
    if n not in settings.pass_looks:
        return False
    e = estimate_passes(passes, settings, cpu)
    return e.busy or _decided_alone(e, settings, benchmarks)  # busy: more passes meet more waiting


def _decided_alone(e: Estimate, settings: ABSettings, benchmarks: int) -> bool:
    """Decided with its p-values multiplied by ``benchmarks``: Bonferroni bounds Holm, so a slowdown found
    here is still one in the final Holm verdict, whatever the other benchmarks show."""
    m = max(benchmarks, 1)
    verdict = verdict_of(e, p_slower=min(1.0, 2 * m * e.p_slower), p_faster=min(1.0, m * e.p_faster),
                         settings=settings, p_cpu_more=min(1.0, 2 * m * e.p_cpu_more))
    return verdict != UNDECIDED
