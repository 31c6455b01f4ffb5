"""The statistics of a detection curve: a plant's measured cost against its nominal share, a share of
trials flagged with its interval, the smallest planted share a path catches, the false-alarm reading,
and ratios.yaml's selftest_* gates decided by the interval. numpy and scipy only.

Conventions: a planted share ``x`` means x more work per sample, certified by the work fingerprint's
float ops (exactly 1 + x times the genuine pipeline's); what it costs in time is read as more time per
sample, the median of planted time over genuine time, minus one, and reported beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from perfsuite.measure.stats import MedianInterval, clopper_pearson, median_interval
from perfsuite.tools.detection.records import (
    PLANT_FAILED,
    PLANT_OK,
    GateDecision,
    Level,
    PathCurve,
    PlantCheck,
)
from perfsuite.verdict.gates import FAIL, INCONCLUSIVE, PASS

CAUGHT_SHARE = 0.95  # "caught": flagged in at least this share of the trials
FALSE_ALARM_SHARE = 0.05  # the false-alarm share at 0 % that a path should stay within
SKIPPED = "skipped"
INTERVAL_COVERAGE = 0.95  # a plant's cost is decided by an interval of at least this coverage


WORK_EXACT = 1e-3  # a plant is certified when its float ops per sample are 1 + level within this share


def certify_plant(level: float, work: float | None, time_ratios: Sequence[float]) -> PlantCheck:
    """Whether planting ``level`` added exactly that share of work: ``work`` the planted pipeline's float
    ops per sample over the genuine one's, minus one (None: no fingerprint read it). The time cost on
    this machine (the median of ``time_ratios`` - 1, planted time per sample over genuine, with its
    order-statistic interval at INTERVAL_COVERAGE) is reported beside it, never required to meet a
    band: this machine's noise, not the plant, decides how well time shows it."""
    if not level > 0:
        raise ValueError(f"level: expected a planted share > 0 to check, found {level}")
    values = np.asarray(list(time_ratios), dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    figures = {"level": level, "measured": None, "pairs": int(values.size), "work": work}
    if values.size:
        interval = median_interval(values - 1)
        shown = interval.coverage >= INTERVAL_COVERAGE
        figures |= {"measured": interval.median, "low": interval.low if shown else None,
                    "high": interval.high if shown else None}
    if work is None:
        return PlantCheck(state=PLANT_FAILED, reason=f"planting {level:.0%}: no work fingerprint certified it",
                          **figures)
    if abs(work - level) > WORK_EXACT * (1 + level):
        return PlantCheck(state=PLANT_FAILED, reason=f"the plant failed: planting {level:.0%} added {work:+.2%} "
                                                     "float ops per sample", **figures)
    return PlantCheck(state=PLANT_OK, **figures)


def level_rate(level: float, flags: Sequence[bool], plant: PlantCheck | None) -> Level:
    """A planted share's trials as a Level: the share flagged with its 95 % Clopper-Pearson interval, or
    no rate when nothing ran or the plant failed (``withheld`` says so)."""
    trials, flagged = len(flags), int(sum(bool(flag) for flag in flags))
    withheld = plant.reason if plant is not None and plant.failed else ""
    if trials == 0 or withheld:
        return Level(level=level, trials=trials, flagged=flagged, rate=None, ci_low=None, ci_high=None,
                     plant=plant, withheld=withheld or "no trial ran")
    low, high = clopper_pearson(successes=flagged, trials=trials)
    return Level(level=level, trials=trials, flagged=flagged, rate=flagged / trials, ci_low=low, ci_high=high,
                 plant=plant)


def _smallest(levels: Sequence[Level], caught) -> float | None:
    """The smallest planted share from which on every level is reported, its plant shown exact and
    ``caught`` (None: none is): a rate over a plant of unknown size supports no claim."""
    planted = [level for level in levels if level.level > 0]
    for index, level in enumerate(planted):
        rest = planted[index:]
        if all(item.reported and (item.plant is None or item.plant.ok) for item in rest) and all(map(caught, rest)):
            return level.level
    return None


def smallest_caught(levels: Sequence[Level]) -> float | None:
    """The smallest planted share caught in at least 95 % of the trials (point share), it and every
    larger one reported and caught; None when no planted share is."""
    return _smallest(levels, lambda level: level.rate >= CAUGHT_SHARE)


def smallest_shown(levels: Sequence[Level]) -> float | None:
    """As smallest_caught, but by the interval: its lower end at least 95 % (no trial missed in at
    least 72 trials)."""
    return _smallest(levels, lambda level: level.ci_low >= CAUGHT_SHARE)


def false_alarm_reading(levels: Sequence[Level]) -> str:
    """The 0 % level in words: within 5 % or not, by the point share, and what the interval shows."""
    zero = next((level for level in levels if level.level == 0), None)
    if zero is None or not zero.reported:
        return "false alarms not measured" + (f": {zero.withheld}" if zero is not None else "")
    within = "within" if zero.rate <= FALSE_ALARM_SHARE else "ABOVE"
    shown = ("the interval shows it" if zero.ci_high <= FALSE_ALARM_SHARE else
             f"the interval (up to {zero.ci_high:.1%}) cannot show it with {zero.trials} trials"
             if zero.rate <= FALSE_ALARM_SHARE else "")
    return (f"false alarms {zero.flagged}/{zero.trials} ({zero.rate:.0%}): {within} {FALSE_ALARM_SHARE:.0%}"
            + (f"; {shown}" if shown else ""))


def finish(curve: PathCurve) -> PathCurve:
    """The curve with its smallest caught share, the one its interval shows and its false-alarm reading."""
    from dataclasses import replace

    return replace(curve, smallest_caught=smallest_caught(curve.levels), smallest_shown=smallest_shown(curve.levels),
                   false_alarm=false_alarm_reading(curve.levels))


def gate_metric(path: str, level: float) -> str:
    """The ratios.yaml metric of a path's share at ``level``: selftest_<path>_false_alarm_rate at 0,
    else selftest_<path>_detection_<percent>pct_rate."""
    if level == 0:
        return f"selftest_{path}_false_alarm_rate"
    return f"selftest_{path}_detection_{round(level * 100)}pct_rate"


def decide_gates(ratios, curves: Sequence[PathCurve], measured_paths: Mapping[str, str]) -> tuple[GateDecision, ...]:
    """Every selftest_<path>_* gate of ``ratios`` (perfsuite.verdict.baselines.RatioGates) decided on its
    path's curve by the 95 % Clopper-Pearson interval of the share (pass: the whole interval within the
    bound; fail: none of it; else inconclusive). A gate whose path or share was not measured is
    ``skipped`` with the reason: ``measured_paths`` maps each path not run to why."""
    by_path = {curve.path: curve for curve in curves}
    decisions = []
    for metric, thresholds in ratios.gates.items():
        match = _gate_level(metric)
        if match is None:
            continue
        path, level = match
        bound = ", ".join(f"{t.symbol} {t.value:g}" for t in thresholds)
        found = _level_of(by_path.get(path), level)
        if isinstance(found, str):
            why = measured_paths.get(path, found)
            decisions.append(GateDecision(metric=metric, bound=bound, decision=SKIPPED, reason=why))
            continue
        interval = MedianInterval(median=found.rate, low=found.ci_low, high=found.ci_high, coverage=0.95,
                                  n=found.trials)
        verdicts = {threshold.decide(interval) for threshold in thresholds}
        decision = FAIL if FAIL in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else PASS
        unresolved = found.plant is not None and not found.plant.ok
        decisions.append(GateDecision(metric=metric, bound=bound, decision=INCONCLUSIVE if unresolved else decision,
                                      rate=found.rate, ci_low=found.ci_low, ci_high=found.ci_high,
                                      reason=f"{found.flagged}/{found.trials} trials"
                                             + (f"; {found.plant.reason}" if unresolved else "")))
    return tuple(decisions)


def _gate_level(metric: str) -> tuple[str, float] | None:
    """(path, level) of a selftest_<path>_* metric, or None for any other metric."""
    for path in ("work", "saved", "ab"):
        prefix = f"selftest_{path}_"
        if not metric.startswith(prefix):
            continue
        rest = metric.removeprefix(prefix)
        if rest == "false_alarm_rate":
            return path, 0.0
        if rest.startswith("detection_") and rest.endswith("pct_rate"):
            number = rest.removeprefix("detection_").removesuffix("pct_rate")
            if number.isdigit():
                return path, int(number) / 100
    return None


def _level_of(curve: PathCurve | None, level: float) -> Level | str:
    """The reported Level at ``level`` of ``curve``, or why there is none."""
    if curve is None:
        return "its path was not run"
    if curve.status == SKIPPED:
        return f"its path was skipped: {curve.reason}"
    found = next((item for item in curve.levels if abs(item.level - level) < 1e-9), None)
    if found is None:
        return f"the {level:.0%} share was not planted"
    if not found.reported:
        return f"no rate at {level:.0%}: {found.withheld}"
    return found
