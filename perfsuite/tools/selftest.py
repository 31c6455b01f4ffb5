"""The regression detector's self-test: planted regressions ("mutants") and the checks of a user's run
that must flag them.

Mutants are planted only through supported options and what the loader lets a caller inject (its
``map_extra``), never by editing files. Each planted regression is judged by exactly what a user's run
uses, read from where that run reads it (``UserPath``: the session's options and ratios.yaml):
``judge_by_gate`` (the shipped gate file), ``judge_by_recorded_threshold`` (a recorded profile, with the
user's margin), ``judge_by_history`` and ``comparison_rate`` (the stored-run comparison with the user's
alpha, minimum effect and number of earlier runs). The genuine configuration must pass, inconclusive
being no pass, and the planted one must fail; the rates go to the plugin, whose ratios.yaml gates
(selftest_*_rate) judge them as any other figure. The self-test has no threshold of its own. The design
(rotated arms pinned to one CPU, the two-probe slowdown calibration) is in docs/selftest.md. TensorFlow
is imported only when a planted slowdown is built, so the decisions load without it.
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
from typing import Any

import numpy as np
from scipy import special

from perfsuite.errors import PinningUnavailable
from perfsuite.measure.rounds import interleaved, rotated
from perfsuite.measure.stats import clopper_pearson
from perfsuite.verdict.baselines import threshold_from_measurement
from perfsuite.verdict.comparison import NOT_JUDGED, compare_history, decide_history
from perfsuite.verdict.gates import FAIL, INCONCLUSIVE, PASS, REGRESSION, check_benchmark, judge

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


# ---------------------------------------------------------------------------------- the user's path


@dataclass(frozen=True)
class UserPath:
    """What a user's run judges with, read from where that run reads it: the stored-run comparison's
    settings from the session's options (--perfsuite-compare-alpha, --perfsuite-compare-min-effect,
    --perfsuite-compare-runs, --perfsuite-baseline-margin; their defaults when not given) and the gates and
    targets from the session's ratios.yaml. The self-test has no setting of its own."""

    alpha: float
    min_effect: float
    history_runs: int  # the newest earlier runs a comparison uses
    margin: float  # between a recorded figure and its threshold
    ratios: Any  # perfsuite.verdict.baselines.RatioGates

    @classmethod
    def of(cls, context, config) -> UserPath:
        """From the session's context (the ``perfsuite`` fixture's) and its pytest config."""
        return cls(alpha=context.compare_alpha, min_effect=context.compare_min_effect,
                   history_runs=int(config.getoption("perfsuite_compare_runs")), margin=context.margin,
                   ratios=context.baselines.ratios)

    def target(self, metric: str) -> str:
        """The bounds ratios.yaml sets on ``metric``, as text (for messages)."""
        thresholds = self.ratios.gates.get(metric, ())
        return ", ".join(f"{t.symbol} {t.value:g}" for t in thresholds) or "no gate"


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
class Rate:
    """How often trials were flagged as slower by the stored-run comparison: count, rate and its 95 %
    Clopper-Pearson interval, and the median over trials of the block's slowdown against the base
    block of the same rounds."""

    name: str
    trials: int
    flagged: int
    rate: float
    ci_low: float
    ci_high: float
    median_slowdown: float

    def as_dict(self) -> dict:
        return asdict(self)


def trial_blocks(values: Sequence[float], *, rounds_per_trial: int) -> list[tuple[float, ...]]:
    """Consecutive, disjoint blocks of rounds; trailing rounds that do not fill a block are left out."""
    if rounds_per_trial < 1:
        raise ValueError(f"rounds_per_trial: expected ≥ 1, found {rounds_per_trial}")
    count = len(values) // rounds_per_trial
    return [tuple(values[i * rounds_per_trial:(i + 1) * rounds_per_trial]) for i in range(count)]


def _nearest(index: int, count: int, k: int) -> list[int]:
    """The k indices of 0..count-1 nearest to ``index`` (not itself), in time order."""
    others = sorted((j for j in range(count) if j != index), key=lambda j: (abs(j - index), j))
    return sorted(others[:k])


def comparison_rate(*, name: str, base: Sequence[float], test: Sequence[float], rounds_per_trial: int,
                    path: UserPath) -> Rate:
    """How often a user's stored-run comparison flags ``test`` as slower: each trial block of interleaved
    rounds is a "run" whose figure is its rate (1 / median round seconds, as samples/s is), judged as the
    plugin judges a benchmark (compare_history, then decide_history) with ``path``'s settings against the
    ``path.history_runs`` blocks of ``base`` nearest to it in time (itself left out). Blocks of one
    process are draws of one machine state, so a later block serves as an earlier run would; they share
    more than separate runs do, so this checks the decision, not a machine's run-to-run noise."""
    if len(base) != len(test):
        raise ValueError(f"base, test: expected the same number of interleaved rounds, found {len(base)} and {len(test)}")
    base_runs = [1 / float(np.median(b)) for b in trial_blocks(base, rounds_per_trial=rounds_per_trial)]
    test_runs = [1 / float(np.median(b)) for b in trial_blocks(test, rounds_per_trial=rounds_per_trial)]
    if len(base_runs) < 2:
        raise ValueError(f"base: expected at least 2 trial blocks of {rounds_per_trial} rounds, found {len(base_runs)}")
    flags = []
    for index, figure in enumerate(test_runs):
        history = [base_runs[j] for j in _nearest(index, len(base_runs), path.history_runs)]
        (decision,) = decide_history([compare_history(history, figure, higher_is_better=True,
                                                      min_effect=path.min_effect, alpha=path.alpha)], alpha=path.alpha)
        if decision.verdict == NOT_JUDGED:
            raise ValueError(f"{name}: expected enough earlier blocks to judge each trial, found: "
                             f"{decision.comparison.reason}")
        flags.append(decision.significant_slowdown)
    flagged = sum(flags)
    low, high = clopper_pearson(successes=flagged, trials=len(flags))
    slowdowns = [b / t - 1 for b, t in zip(base_runs, test_runs)]
    return Rate(name=name, trials=len(flags), flagged=flagged, rate=flagged / len(flags), ci_low=low, ci_high=high,
                median_slowdown=float(np.median(slowdowns)))


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
                                margin: float) -> PlantedJudgement:
    """A threshold recorded from a genuine run (as --perfsuite-save-baselines records it into a machine
    profile, with the user's run's ``margin``) judging a second genuine run and the planted one, as a
    user's run with that profile does."""
    threshold = threshold_from_measurement(metric=metric, measured=recorded, margin=margin)
    good, bad = (judge(f"selftest::{mutant}", threshold, {metric: value}, "recorded profile")
                 for value in (genuine, planted))
    return PlantedJudgement(mutant=mutant, check=f"a recorded threshold {threshold.key} {threshold.symbol} "
                            f"{threshold.value:g} (recorded {recorded:g}, margin {margin:g})",
                            genuine=good.decision, planted=bad.decision,
                            evidence=f"genuine {good.evidence}; planted {bad.evidence}")


def judge_by_history(*, mutant: str, history: Sequence[float], genuine: float, planted: float,
                     path: UserPath, higher_is_better: bool = True) -> PlantedJudgement:
    """The stored-run comparison a user's run makes (compare_history, then decide_history, with
    ``path``'s settings and its newest ``path.history_runs`` runs): the genuine figure and the planted
    one, each against the same earlier runs. Pass: not slower (no change or faster); fail: a
    significant slowdown of at least the user's minimum effect."""
    history = list(history)[-path.history_runs:]
    decisions = [decide_history([compare_history(history, figure, higher_is_better=higher_is_better,
                                                 alpha=path.alpha, min_effect=path.min_effect)],
                                alpha=path.alpha)[0] for figure in (genuine, planted)]
    if decisions[0].verdict == NOT_JUDGED:
        raise ValueError(f"history: expected enough earlier runs to judge the {mutant} mutant, found: "
                         f"{decisions[0].comparison.reason}")
    good, bad = (FAIL if d.significant_slowdown else PASS for d in decisions)
    return PlantedJudgement(mutant=mutant, check=f"the stored-run comparison with {len(history)} earlier runs "
                            f"(alpha {path.alpha:g}, min effect {path.min_effect:.0%})", genuine=good, planted=bad,
                            evidence=f"genuine {decisions[0].comparison.reason}; planted {decisions[1].comparison.reason}")


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
