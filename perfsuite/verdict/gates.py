"""Thresholds and the verdicts on them, decided with their uncertainty.

A metric measured in several interleaved rounds is judged by the confidence interval of its median
over those rounds (``perfsuite.measure.stats.median_interval``): it fails only when the whole
interval lies on the wrong side of the threshold, passes when it lies on the right side, and is
"inconclusive" when it straddles it — shown as such, never failed, because a verdict that noise can
flip makes users switch the suite off. A metric with no rounds is judged on its single value.

Roles: a "regression" gate guards a claim a regression can break; a "context" gate states a contrast
that only an improvement of the slow side (or a broken measurement) can break, such as "the
numpy_function pipeline starves the step". A context verdict is decided and shown, but it never fails a
run and is never counted as a passed gate.

Rounds: a gate measured in rounds that is still inconclusive after the planned rounds gets more of them
(the fixture, through ``measure.rounds.until_decided``) until it is decided, ``max_rounds`` is reached,
or the measurement has spent twice its time budget (the budget, or the planned rounds' time where they
took longer); the outcome says which, so a summary can say the budget ran out undecided.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from perfsuite.measure.stats import MedianInterval, median_interval
from perfsuite.records import Record
from perfsuite.verdict.metrics import format_number

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
REGRESSION, CONTEXT = "regression", "context"
ROLES = (REGRESSION, CONTEXT)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Threshold:
    """One bound on one metric: kind 'min' admits values >= value, 'max' values <= value. ``claim``
    says in words what the bound protects (a gate file states it; a recorded threshold has none).
    ``role``: REGRESSION (a verdict that can fail the run) or CONTEXT (shown, never counted)."""

    metric: str
    kind: str
    value: float
    claim: str = ""
    role: str = REGRESSION

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"Threshold.role: expected one of {ROLES}, found {self.role!r}")

    @property
    def key(self) -> str:
        return f"{self.kind}_{self.metric}"

    @property
    def symbol(self) -> str:
        return "≥" if self.kind == "min" else "≤"

    def admits(self, measured: float) -> bool:
        return measured >= self.value if self.kind == "min" else measured <= self.value

    def decide(self, interval: MedianInterval) -> str:
        """PASS when the whole interval is admitted, FAIL when none of it is, else INCONCLUSIVE."""
        admitted = [self.admits(interval.low), self.admits(interval.high)]
        if all(admitted):
            return PASS
        if not any(admitted):
            return FAIL
        return INCONCLUSIVE


@dataclass(frozen=True)
class Verdict(Record):
    """One threshold checked against one measurement (and its per-round interval, when it has rounds).
    The threshold's fields are the verdict's own, its value named ``threshold``; ``bound`` is the Threshold."""

    DERIVED: ClassVar[tuple[str, ...]] = ("message",)

    benchmark_id: str
    metric: str
    kind: str
    threshold: float
    claim: str
    role: str
    measured: float | None  # None: not measured, or not a number (see note)
    source: str  # the file the threshold came from
    decision: str  # PASS, FAIL or INCONCLUSIVE
    interval: MedianInterval | None = None
    note: str = ""

    @classmethod
    def of(cls, benchmark_id: str, bound: Threshold, measured: float | None, source: str, decision: str,
           interval: MedianInterval | None = None, note: str = "") -> Verdict:
        """The verdict on ``bound``, its fields copied."""
        return cls(benchmark_id=benchmark_id, metric=bound.metric, kind=bound.kind, threshold=bound.value,
                   claim=bound.claim, role=bound.role, measured=measured, source=source, decision=decision,
                   interval=interval, note=note)

    @property
    def bound(self) -> Threshold:
        return Threshold(metric=self.metric, kind=self.kind, value=self.threshold, claim=self.claim, role=self.role)

    @property
    def is_context(self) -> bool:
        return self.role == CONTEXT

    @property
    def passed(self) -> bool:
        """Not failed: an inconclusive verdict does not fail a run, nor does a context verdict."""
        return self.decision != FAIL or self.is_context

    @property
    def label(self) -> str:
        """The verdict as the summary shows it: ok, FAILED, inconclusive; a context verdict says whether
        the contrast holds, never "ok"."""
        if self.is_context:
            shown = {PASS: "holds", FAIL: "does not hold"}.get(self.decision, self.decision)
            return f"context: {shown}"
        return {PASS: "ok", FAIL: "FAILED"}.get(self.decision, self.decision)

    @property
    def evidence(self) -> str:
        """The measured figure with its interval and rounds, as the summary shows it."""
        if self.measured is None:
            return self.note
        text = format_number(self.measured)
        if self.interval is not None:
            i = self.interval
            text += (f" [{format_number(i.low)}, {format_number(i.high)}] "
                     f"({i.n} rounds, {i.coverage:.0%} interval)")
        return text

    @property
    def message(self) -> str:
        threshold = f"threshold {self.bound.symbol} {format_number(self.threshold)} ({self.source})"
        claim = f" — {self.claim}" if self.claim else ""
        measured = self.note if self.measured is None else f"measured {self.evidence}"
        decision = f"{self.role} {self.decision}" if self.is_context else self.decision
        return f"{self.metric}: {decision}: {measured}, {threshold}{claim}"


@dataclass(frozen=True)
class CheckResult(Record):
    """All verdicts for one benchmark, and notes on what was not checked and why."""

    DERIVED: ClassVar[tuple[str, ...]] = ("passed",)

    benchmark_id: str
    verdicts: tuple[Verdict, ...]
    notes: tuple[str, ...]

    @property
    def failures(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.passed)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def undecided(self) -> tuple[Verdict, ...]:
        """Inconclusive verdicts that count: the ones more rounds should decide (context ones excluded)."""
        return tuple(v for v in self.verdicts if v.decision == INCONCLUSIVE and not v.is_context)


def judge(benchmark_id: str, threshold: Threshold, metrics: Mapping[str, Any], source: Path | str,
          rounds: Sequence[float] | None = None) -> Verdict:
    """The verdict on one threshold: from the per-round interval when ``rounds`` has at least 2 values,
    else from the single measured value. A missing or non-finite value fails ("not measured")."""
    def verdict(measured, decision, interval=None, note=""):
        return Verdict.of(benchmark_id, threshold, measured, str(source), decision, interval, note)

    value = metrics.get(threshold.metric)
    if threshold.metric not in metrics:
        return verdict(None, FAIL, note="not measured")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return verdict(None, FAIL, note=f"not a number ({value!r})")
    if not math.isfinite(value):
        return verdict(None, FAIL, note=f"not a finite number ({value!r})")
    if rounds is not None and len(rounds) >= 2:
        interval = median_interval(rounds, confidence=CONFIDENCE)
        return verdict(float(value), threshold.decide(interval), interval)
    return verdict(float(value), PASS if threshold.admits(value) else FAIL)


def check_benchmark(*, profile, ratios, benchmark_id: str, metrics: Mapping[str, Any],
                    rounds: Mapping[str, Sequence[float]] | None = None) -> CheckResult:
    """Check one benchmark's metrics against the matched profile's thresholds for its id (``profile``
    None: no profile matches this machine) and every same-run gate whose metric it reports.

    A profile threshold whose metric is missing fails ("not measured"); it never passes silently.
    Same-run gates apply only where the benchmark reports the metric (see ``gates_not_measured``).
    """
    rounds = rounds or {}
    verdicts, notes = [], []
    if profile is not None and benchmark_id in profile.benchmarks:
        verdicts += [judge(benchmark_id, t, metrics, profile.path, rounds.get(t.metric))
                     for t in profile.benchmarks[benchmark_id]]
    elif profile is not None:
        notes.append(f"no absolute thresholds for {benchmark_id!r} in {profile.path}")
    for metric, gates in ratios.gates.items():
        if metric in metrics:
            verdicts += [judge(benchmark_id, t, metrics, ratios.path, rounds.get(metric)) for t in gates]
    return CheckResult(benchmark_id=benchmark_id, verdicts=tuple(verdicts), notes=tuple(notes))


def gates_not_measured(ratios, results: Iterable[CheckResult]) -> tuple[str, ...]:
    """Same-run gates that no checked benchmark reported (e.g. deselected, or a peer not installed)."""
    checked = {v.metric for result in results for v in result.verdicts if v.source == str(ratios.path)}
    return tuple(metric for metric in ratios.gates if metric not in checked)
