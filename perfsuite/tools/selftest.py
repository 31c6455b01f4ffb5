"""The regression detector's self-test: planted regressions ("mutants"), the decisions that must flag
them, and the calibration of the slowdown gate from noise measured in the same run.

Mutants are planted only through supported options and what the loader lets a caller inject (its
``map_extra``), never by editing files. Each planted regression is judged by a check a user's run makes
(``judge_by_gate``: the shipped gate file; ``judge_by_recorded_threshold``: a recorded profile;
``judge_by_history`` / ``judge_rates_by_history``: the stored-run comparison): the genuine configuration
must pass, inconclusive being no pass, and the planted one must fail. The design (rotated arms pinned to
one CPU, the sign test plus a noise-derived minimum effect, the two-probe slowdown calibration) and why
it is so are in docs/selftest.md. TensorFlow is imported only when a planted slowdown is built, so the decisions load
without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import special
from scipy import stats as sps

from perfsuite.errors import PinningUnavailable
from perfsuite.measure import stats
from perfsuite.measure.rounds import interleaved, rotated
from perfsuite.measure.stats import clopper_pearson
from perfsuite.verdict.ab import sign_test
from perfsuite.verdict.baselines import threshold_from_measurement
from perfsuite.verdict.comparison import SLOWER, compare_history
from perfsuite.verdict.gates import FAIL, INCONCLUSIVE, PASS, REGRESSION, check_benchmark, judge

K_DEFAULT = 3.0
THRESHOLD_FLOOR = 0.02
ALPHA_DEFAULT = 0.01  # the plugin's default --perfsuite-compare-alpha
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # 1.2533: standard error of a median / (sigma / sqrt(n))

# Targets of the self-test issue.
TARGET_FALSE_ALARM_RATE = 0.01
TARGET_DETECTION_RATE = 0.95

LOADER_MUTANTS = ("numpy_function", "no_prefetch", "dynamic_shapes")
STEP_MUTANTS = ("eager", "dynamic_shapes")


# ------------------------------------------------------------------------------------- mutants


def planted_slowdown(fraction: float, mel_config) -> Callable:
    """A loader ``map_extra`` that adds work to every element: the mel of a random signal ``fraction`` as
    long as the element's. The result is added times a zero computed at run time, so no optimiser can
    prove it dead and the data are unchanged."""
    if not fraction > 0:
        raise ValueError(f"fraction: expected a positive share of one mel for the slowdown mutant, found {fraction!r}")
    from perfsuite._tensorflow import tensorflow
    from perfsuite.data.audio import log_mel_tf

    tf = tensorflow()

    def add_work(mel, element):
        # At least one frame: the mean of an empty mel is NaN, and NaN times zero would poison the data.
        frames = tf.maximum(tf.cast(tf.cast(tf.shape(mel)[0], tf.float32) * fraction, tf.int32), 1)
        noise = tf.random.stateless_uniform([frames * mel_config.hop_length], seed=[1, 2], minval=-0.5, maxval=0.5)
        zero = tf.cast(tf.strings.length(element["path"]) < 0, tf.float32)  # always 0, unknown until run time
        return mel + zero * tf.reduce_mean(log_mel_tf(noise, mel_config))

    return add_work


def mutant_loader_config(base, mutant: str):
    """``base`` (a LoaderConfig) with one planted regression, through its own options.

    numpy_function: the numpy_function loader in place of tf_native; no_prefetch: prefetch=0;
    dynamic_shapes: per-batch padding instead of static shapes. (A slowdown: ``planted_slowdown``.)
    """
    if mutant not in LOADER_MUTANTS:
        raise ValueError(f"mutant: expected one of {LOADER_MUTANTS}, found {mutant!r}")
    if mutant == "numpy_function":
        if base.kind != "tf_native":
            raise ValueError(f"base.kind: expected 'tf_native' to swap for numpy_function, found {base.kind!r}")
        return dataclasses.replace(base, kind="numpy_function")
    if mutant == "no_prefetch":
        return dataclasses.replace(base, prefetch=0)
    return dataclasses.replace(base, static_shapes=False, max_text_len=None, max_mel_frames=None)


def mutant_step_options(base: Mapping, mutant: str) -> dict:
    """make_train_step keyword arguments ``base`` with one planted regression.

    eager: mode='eager' in place of a compiled mode; dynamic_shapes: no static input signature.
    """
    if mutant not in STEP_MUTANTS:
        raise ValueError(f"mutant: expected one of {STEP_MUTANTS}, found {mutant!r}")
    options = dict(base)
    if mutant == "eager":
        if options.get("mode", "graph") == "eager":
            raise ValueError("base mode: expected a compiled mode ('graph' or 'xla') to replace, found 'eager'")
        options["mode"] = "eager"
    else:
        options["input_shapes"] = None
    return options


def write_fortran_cache_copy(*, cache_dir: Path, dest: Path, utt_id: str) -> Path:
    """Copy the cache to ``dest`` and rewrite one mel Fortran-ordered (np.save of np.asfortranarray).

    The original cache is untouched. Returns the path of the rewritten file. A 2-D mel with more than
    one row and column is needed: for a single row Fortran and C order are the same bytes.
    """
    cache_dir, dest = Path(cache_dir), Path(dest)
    if dest.exists():
        raise FileExistsError(f"dest: expected a new directory for the cache copy, found existing {dest}")
    shutil.copytree(cache_dir, dest)
    path = dest / "mels" / f"{utt_id}.npy"
    mel = np.load(path)
    if mel.ndim != 2 or min(mel.shape) < 2:
        raise ValueError(f"{path}: expected a 2-D mel with ≥ 2 rows and columns, found shape {mel.shape}")
    np.save(path, np.asfortranarray(mel))  # path ends in .npy, so np.save writes exactly this file
    return path


# ----------------------------------------------------------------------------- interleaved rounds


def _threads() -> list[int]:
    return [int(tid) for tid in os.listdir("/proc/self/task")]


def idlest_cpu(cpus, *, window_s: float = 0.2) -> int:
    """The CPU of ``cpus`` with the most idle time over ``window_s`` (from /proc/stat); the highest-numbered
    one where /proc/stat cannot be read."""
    cpus = sorted(cpus)

    def idle() -> dict[int, int]:
        ticks = {}
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if name.startswith("cpu") and name[3:].isdigit():
                    ticks[int(name[3:])] = int(fields[3]) + int(fields[4])  # idle + iowait
        return ticks

    try:
        before = idle()
        time.sleep(window_s)
        after = idle()
        return max(cpus, key=lambda cpu: (after.get(cpu, 0) - before.get(cpu, 0), cpu))
    except (OSError, ValueError, IndexError):
        return cpus[-1]


@contextlib.contextmanager
def pinned_to_one_cpu(cpu: int | None = None) -> Iterator[int]:
    """Pin every thread of this process (and so every thread they start) to one CPU; restore on exit.

    The self-test's arms each own tf.data threads. Left to the scheduler, one arm's threads can sit on
    the core another process is using while another arm's sit on a free one, for seconds at a time: a
    persistent per-arm bias that no interleaving cancels, and overlap between an arm's consumer and its
    map thread that comes and goes with the other core's load. On one CPU every arm runs the same way.
    Yields the CPU. Raises PinningUnavailable where threads cannot be pinned.
    """
    if not (hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")):
        raise PinningUnavailable("pinning threads to a CPU needs os.sched_setaffinity and /proc/self/task (Linux)")
    allowed = os.sched_getaffinity(0)
    cpu = idlest_cpu(allowed) if cpu is None else cpu
    if cpu not in allowed:
        raise ValueError(f"cpu: expected one of the CPUs this process may use {sorted(allowed)}, found {cpu}")
    saved = {}
    for tid in _threads():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpu})
    try:
        yield cpu
    finally:
        for tid in _threads():  # threads started inside get the process's original CPUs back
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, saved.get(tid, allowed))


def run_interleaved(arms: Mapping[str, Callable[[], float]], *, rounds: int) -> dict[str, tuple[float, ...]]:
    """Run every arm once per round in rounds.rotated order (each arm in each position equally often over
    2 x arms rounds, so a drift within a round favours no arm); returns each arm's per-round seconds."""
    def timed(name: str) -> Callable[[], float]:
        def run() -> float:
            seconds = float(arms[name]())
            if not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(f"arm {name!r}: expected a positive round time in seconds, found {seconds}")
            return seconds
        return run

    values, _ = interleaved({name: timed(name) for name in arms}, rounds=rounds, order=rotated)
    return {name: tuple(v) for name, v in values.items()}


# ---------------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class SlowdownGate:
    """The slowdown gate of one run: threshold = max(floor, k * 1.2533 * noise_cv / sqrt(rounds_per_trial))."""

    k: float
    noise_cv: float  # robust CV of the A/A per-round ratio
    calibration_rounds: int
    rounds_per_trial: int
    floor: float
    threshold: float  # minimum relative slowdown of the median round time
    alpha: float  # significance level of the paired sign test

    def as_dict(self) -> dict:
        return asdict(self)


def unmeasurable_reason(gate: SlowdownGate, *, smallest_target: float) -> str | None:
    """Why this machine's noise makes the planted slowdowns unmeasurable, or None when it does not.

    A planted slowdown can be told apart only when the gate's minimum effect (k standard errors of a
    trial's median, from the A/A noise) sits well below it: at least half the smallest target is left
    for the planted arm's own spread and the probes' calibration error."""
    if gate.threshold < smallest_target / 2:
        return None
    return (f"this machine's A/A noise (robust CV {gate.noise_cv:.1%} a round) gives a minimum detectable slowdown "
            f"of {gate.threshold:.1%} a trial, not below half the smallest planted slowdown "
            f"({smallest_target:.0%}): the planted amounts are unmeasurable here")


def history_rates(*, base, test, rounds_per_trial: int, history_runs: int, alpha: float, min_effect: float):
    """The comparison with earlier runs (perfsuite.verdict.comparison) on the self-test's own rounds:
    each trial block's median round time is one "run"; a block of ``test`` is judged against the
    preceding ``history_runs`` blocks of ``base``. Returns (flagged, judged). Blocks of one process
    share more than separate runs do, so this checks the path, not a machine's run-to-run noise."""
    base_runs = [float(np.median(block)) for block in trial_blocks(base, rounds_per_trial=rounds_per_trial)]
    test_runs = [float(np.median(block)) for block in trial_blocks(test, rounds_per_trial=rounds_per_trial)]
    flagged = judged = 0
    for index in range(history_runs, len(test_runs)):
        comparison = compare_history(base_runs[index - history_runs:index], test_runs[index], higher_is_better=False,
                                     min_effect=min_effect, alpha=alpha, min_runs=history_runs)
        judged += 1
        flagged += comparison.verdict == "slower"
    return flagged, judged


def calibrate_gate(*, aa_ratios, rounds_per_trial: int, k: float = K_DEFAULT, floor: float = THRESHOLD_FLOOR,
                   alpha: float = ALPHA_DEFAULT) -> SlowdownGate:
    """The slowdown gate from A/A per-round ratios measured in the same run (see the module notes)."""
    ratios = np.asarray(aa_ratios, dtype=float)
    if ratios.size < 8:
        raise ValueError(f"aa_ratios: expected at least 8 A/A ratios to estimate the noise, found {ratios.size}")
    if rounds_per_trial < 3:
        raise ValueError(f"rounds_per_trial: expected ≥ 3, found {rounds_per_trial}")
    if not k > 0:
        raise ValueError(f"k: expected a positive multiple of the noise, found {k}")
    noise_cv = float(stats.summarize(ratios).robust_cv)
    threshold = max(floor, k * MEDIAN_SE_FACTOR * noise_cv / math.sqrt(rounds_per_trial))
    return SlowdownGate(k=k, noise_cv=noise_cv, calibration_rounds=int(ratios.size),
                        rounds_per_trial=rounds_per_trial, floor=floor, threshold=threshold, alpha=alpha)


def calibrate_fraction(*, probes: Mapping[float, float], target: float) -> float:
    """planted_slowdown fraction expected to slow the pipeline by ``target``.

    ``probes`` maps probe fractions to the slowdowns they measured (≥ 2 points). The slowdown is
    modelled as fixed + slope * fraction (the extra ops cost something per element whatever the
    fraction; the extra mel grows with it); the line is fitted by least squares and solved for the
    target. Raises when the slope is not positive or the target is below the fixed part (no
    fraction can slow the pipeline that little).
    """
    if len(probes) < 2:
        raise ValueError(f"probes: expected ≥ 2 (fraction, slowdown) points, found {len(probes)}")
    fractions = np.array(list(probes), dtype=float)
    slowdowns = np.array(list(probes.values()), dtype=float)
    if not (np.all(fractions > 0) and np.all(np.isfinite(slowdowns))):
        raise ValueError(f"probes: expected fractions > 0 and finite slowdowns, found {dict(probes)}")
    slope, fixed = np.polyfit(fractions, slowdowns, 1)
    if not slope > 0:
        raise ValueError(f"probe slowdowns: expected them to grow with the fraction, found {dict(probes)}; "
                         "spread the probe fractions further apart or lengthen the round")
    if target <= fixed:
        raise ValueError(f"target: expected above the seam's fixed cost {fixed:.1%} (probes {dict(probes)}), "
                         f"found {target:.1%}; use longer utterances so the fixed part weighs less")
    return float((target - fixed) / slope)


# ------------------------------------------------------------------------------------ decisions


@dataclass(frozen=True)
class TrialDecision:
    """One A/B trial: the comparison's verdict, the throughput gate's verdict, and the figures."""

    flagged: bool  # significant-change comparison: sign test significant, slower, effect ≥ threshold
    throughput_flagged: bool  # median paired ratio B/A of round times ≥ 1 + threshold (no significance test)
    paired_ratio: float  # median of per-round B/A time ratios
    p_value: float  # one-sided exact sign test of log(B/A) > 0
    wilcoxon_p_value: float  # one-sided Wilcoxon signed-rank test of log(B/A) > 0, for reference

    def as_dict(self) -> dict:
        return asdict(self)


def slower_sign_p(log_ratios) -> float:
    """p of the one-sided exact sign test (verdict.ab.sign_test) that log(B/A) > 0 more often than not;
    rounds with a zero ratio are dropped."""
    values = np.asarray(log_ratios, dtype=float)
    nonzero = values[values != 0]
    return sign_test(int(np.sum(nonzero > 0)), int(nonzero.size))


def decide_slowdown(*, base, test, gate: SlowdownGate) -> TrialDecision:
    """Is ``test`` (per-round seconds) slower than ``base`` (the same rounds, interleaved)?

    The rounds are pairs (A and B ran back to back), so the test is paired: a one-sided sign test on
    the log ratios at ``gate.alpha``, plus the minimum effect ``gate.threshold`` on their median (see
    the module notes). The Wilcoxon signed-rank test is reported too: the occasional large ratio of a
    disturbed round can pull it down, which a sign test shrugs off.
    """
    log_ratios = np.log(stats.ratio_of(test, base))
    paired = float(np.exp(np.median(log_ratios)))
    if np.all(log_ratios == 0):
        wilcoxon = 1.0
    else:
        wilcoxon = float(sps.wilcoxon(log_ratios, alternative="greater", zero_method="zsplit").pvalue)
    p_value = slower_sign_p(log_ratios)
    slower_enough = paired - 1.0 >= gate.threshold
    return TrialDecision(flagged=bool(p_value < gate.alpha and slower_enough), throughput_flagged=bool(slower_enough),
                         paired_ratio=paired, p_value=p_value, wilcoxon_p_value=wilcoxon)


@dataclass(frozen=True)
class Rate:
    """How often trials flagged: count, rate and its 95 % Clopper-Pearson interval."""

    name: str
    trials: int
    flagged: int
    throughput_flagged: int  # the median ratio passed the threshold (no significance test)
    wilcoxon_flagged: int  # the decision with the Wilcoxon signed-rank test in place of the sign test
    rate: float
    ci_low: float
    ci_high: float
    median_slowdown: float  # median over trials of the paired ratio - 1

    def as_dict(self) -> dict:
        return asdict(self)


def trial_blocks(values: Sequence[float], *, rounds_per_trial: int) -> list[tuple[float, ...]]:
    """Consecutive, disjoint blocks of rounds; trailing rounds that do not fill a block are left out."""
    if rounds_per_trial < 1:
        raise ValueError(f"rounds_per_trial: expected ≥ 1, found {rounds_per_trial}")
    count = len(values) // rounds_per_trial
    return [tuple(values[i * rounds_per_trial:(i + 1) * rounds_per_trial]) for i in range(count)]


def detection_rate(*, name: str, base: Sequence[float], test: Sequence[float], gate: SlowdownGate) -> Rate:
    """Run one trial per disjoint block of ``gate.rounds_per_trial`` interleaved rounds; count the flags."""
    if len(base) != len(test):
        raise ValueError(f"base, test: expected the same number of interleaved rounds, found {len(base)} and {len(test)}")
    decisions = [decide_slowdown(base=a, test=b, gate=gate)
                 for a, b in zip(trial_blocks(base, rounds_per_trial=gate.rounds_per_trial),
                                 trial_blocks(test, rounds_per_trial=gate.rounds_per_trial), strict=True)]
    if not decisions:
        raise ValueError(f"base: expected at least {gate.rounds_per_trial} rounds for one trial, found {len(base)}")
    flagged = sum(d.flagged for d in decisions)
    low, high = clopper_pearson(successes=flagged, trials=len(decisions))
    return Rate(name=name, trials=len(decisions), flagged=flagged,
                throughput_flagged=sum(d.throughput_flagged for d in decisions),
                wilcoxon_flagged=sum(d.throughput_flagged and d.wilcoxon_p_value < gate.alpha for d in decisions),
                rate=flagged / len(decisions),
                ci_low=low, ci_high=high, median_slowdown=float(np.median([d.paired_ratio for d in decisions])) - 1)


# ------------------------------------------------------------------ planted regressions, judged as shipped

@dataclass(frozen=True)
class PlantedJudgement:
    """One planted regression judged by a check a user's run makes: the shipped gate on ``check`` (a
    metric of benchmarks/baselines/ratios.yaml, or a threshold recorded from the genuine run) or the
    stored-run comparison. ``genuine`` and ``planted``: the verdicts on each configuration (pass, fail or
    inconclusive). As expected only when the genuine one passes (inconclusive is no pass) and the planted
    one fails."""

    mutant: str
    check: str
    genuine: str
    planted: str
    evidence: str

    @property
    def as_expected(self) -> bool:
        return self.genuine == PASS and self.planted == FAIL

    @property
    def message(self) -> str:
        return (f"{self.mutant} judged by {self.check}: expected the genuine configuration to pass and the planted "
                f"one to fail, found {self.genuine} and {self.planted} ({self.evidence})")

    def as_dict(self) -> dict:
        return {**asdict(self), "as_expected": self.as_expected}


def judge_by_gate(ratios, *, mutant: str, metric: str, genuine: Sequence[float], planted: Sequence[float],
                  genuine_value: float | None = None, planted_value: float | None = None) -> PlantedJudgement:
    """Both configurations' per-round values of ``metric`` judged by the shipped gate on it in ``ratios``
    (perfsuite.verdict.baselines.RatioGates), exactly as a user's run judges a benchmark reporting it
    (check_benchmark: the interval of the median over the rounds). Values default to the rounds' median.
    Raises when the gate file has no gate that counts on ``metric``: a context gate judges no regression."""
    thresholds = ratios.gates.get(metric, ())
    if not thresholds or any(t.role != REGRESSION for t in thresholds):
        raise ValueError(f"{ratios.path}: expected a regression gate on {metric!r} to judge the {mutant} mutant, "
                         f"found {[t.role for t in thresholds] or 'none'}")

    def decision(rounds, value):
        value = float(np.median(rounds)) if value is None else value
        check = check_benchmark(profile=None, ratios=ratios, benchmark_id=f"selftest::{mutant}",
                                metrics={metric: value}, rounds={metric: list(rounds)})
        verdicts = [v for v in check.verdicts if v.metric == metric]
        decisions = {v.decision for v in verdicts}
        return (FAIL if FAIL in decisions else INCONCLUSIVE if INCONCLUSIVE in decisions else PASS,
                "; ".join(v.evidence for v in verdicts))

    good, good_evidence = decision(genuine, genuine_value)
    bad, bad_evidence = decision(planted, planted_value)
    bound = ", ".join(f"{t.symbol} {t.value:g}" for t in thresholds)
    return PlantedJudgement(mutant=mutant, check=f"the shipped gate {metric} {bound} ({ratios.path})", genuine=good,
                            planted=bad, evidence=f"genuine {good_evidence}; planted {bad_evidence}")


def judge_by_recorded_threshold(*, mutant: str, metric: str, recorded: float, genuine: float, planted: float,
                                margin: float = 0.25) -> PlantedJudgement:
    """A threshold recorded from a genuine run (as --perfsuite-save-baselines records it into a machine
    profile) judging a second genuine run and the planted one, as a user's run with that profile does."""
    threshold = threshold_from_measurement(metric=metric, measured=recorded, margin=margin)
    good, bad = (judge(f"selftest::{mutant}", threshold, {metric: value}, "recorded profile")
                 for value in (genuine, planted))
    return PlantedJudgement(mutant=mutant, check=f"a recorded threshold {threshold.key} {threshold.symbol} "
                            f"{threshold.value:g} (recorded {recorded:g}, margin {margin:g})",
                            genuine=good.decision, planted=bad.decision,
                            evidence=f"genuine {good.evidence}; planted {bad.evidence}")


def judge_by_history(*, mutant: str, history: Sequence[float], genuine: float, planted: float,
                     higher_is_better: bool = True, alpha: float = ALPHA_DEFAULT,
                     min_effect: float = 0.10) -> PlantedJudgement:
    """The stored-run comparison a user's run makes (perfsuite.verdict.comparison.compare_history, one
    benchmark): the genuine figure and the planted one, each against the same earlier runs. Pass: not
    slower (no change or faster); fail: a significant slowdown of at least ``min_effect``."""
    verdicts = [compare_history(history, figure, higher_is_better=higher_is_better, alpha=alpha,
                                min_effect=min_effect) for figure in (genuine, planted)]
    if not verdicts[0].judged:
        raise ValueError(f"history: expected enough earlier runs to judge the {mutant} mutant, found: "
                         f"{verdicts[0].reason}")
    good, bad = (FAIL if v.verdict == SLOWER else PASS for v in verdicts)
    return PlantedJudgement(mutant=mutant, check=f"the stored-run comparison with {len(history)} earlier runs "
                            f"(alpha {alpha:g}, min effect {min_effect:.0%})", genuine=good, planted=bad,
                            evidence=f"genuine {verdicts[0].reason}; planted {verdicts[1].reason}")


def judge_rates_by_history(*, mutant: str, base, genuine, planted, rounds_per_trial: int, history_runs: int,
                           alpha: float, min_effect: float) -> PlantedJudgement:
    """``history_rates`` for an unchanged arm and a planted one against the same base blocks: the genuine
    arm passes when at most TARGET_FALSE_ALARM_RATE of its blocks are flagged, the planted one fails when
    at least TARGET_DETECTION_RATE of its blocks are (the self-test's targets, read on the user's path)."""
    options = {"rounds_per_trial": rounds_per_trial, "history_runs": history_runs, "alpha": alpha,
               "min_effect": min_effect}
    good, judged = history_rates(base=base, test=genuine, **options)
    bad, _ = history_rates(base=base, test=planted, **options)
    if not judged:
        raise ValueError(f"base: expected more than {history_runs} trial blocks to judge the {mutant} mutant")
    return PlantedJudgement(
        mutant=mutant, check=f"the stored-run comparison, each trial block against the {history_runs} before it "
        f"(alpha {alpha:g}, min effect {min_effect:.0%})",
        genuine=PASS if good / judged <= TARGET_FALSE_ALARM_RATE else FAIL,
        planted=FAIL if bad / judged >= TARGET_DETECTION_RATE else PASS,
        evidence=f"genuine flagged in {good}/{judged} blocks, planted in {bad}/{judged}")


def history_unmeasurable_reason(history: Sequence[float], *, slowdown: float, alpha: float) -> str | None:
    """Why the earlier runs' spread makes a planted ``slowdown`` (a share of more time) undetectable by
    the stored-run comparison at ``alpha``, or None: the smallest slowdown it can flag is
    t(k-1, 1-alpha) x sd(log figures) x sqrt(1 + 1/k) in log terms (see compare_history)."""
    logs = np.log(np.asarray(history, dtype=float))
    k = logs.size
    smallest = math.expm1(float(special.stdtrit(k - 1, 1 - alpha)) * float(np.std(logs, ddof=1)) * math.sqrt(1 + 1 / k))
    if smallest < slowdown:
        return None
    return (f"this machine's run-to-run noise over {k} runs lets the stored-run comparison flag only slowdowns of "
            f"{smallest:.0%} or more at alpha {alpha:g}, not the planted {slowdown:.0%}: unmeasurable here")
