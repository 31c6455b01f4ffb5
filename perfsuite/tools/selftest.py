"""The regression detector's self-test: planted regressions ("mutants") and the checks of a user's run
that must flag them.

Mutants are planted only through supported options and what the loader lets a caller inject (its
``map_extra``), never by editing files. Each planted regression is judged by exactly what a user's run
uses, read from where that run reads it (``UserPath``: the session's options and ratios.yaml):
``judge_by_gate`` (the shipped gate file), ``judge_by_recorded_threshold`` (a recorded profile, with the
user's margin) and ``judge_by_history`` (the stored-run comparison with the user's alpha, minimum effect and
number of earlier runs). The genuine configuration must pass, inconclusive being no pass, and the planted
one must fail. The self-test has no threshold of its own. The false-alarm and detection rates are
`perfsuite selftest`'s (perfsuite.tools.detection: exact plants, one curve per path). TensorFlow is imported
only when a planted slowdown is built, so the decisions load without it.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from scipy import special

from perfsuite.records import Record
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


# ------------------------------------------------------------------------------------ decisions


# ------------------------------------------------------------------ planted regressions, judged as shipped

@dataclass(frozen=True)
class PlantedJudgement(Record):
    """One planted regression judged by a check a user's run makes: the shipped gate on ``check`` (a
    metric of benchmarks/baselines/ratios.yaml, or a threshold recorded from the genuine run) or the
    stored-run comparison. ``genuine`` and ``planted``: the verdicts on each configuration (pass, fail or
    inconclusive). As expected only when the genuine one passes (inconclusive is no pass) and the planted
    one fails."""

    DERIVED: ClassVar[tuple[str, ...]] = ("as_expected",)

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
