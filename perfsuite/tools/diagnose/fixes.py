"""The fixes stage: each fix perfsuite can apply without the user's code against the pipeline as it is, in
rounds alternating before and after, its gain (after / before per round) decided when it leaves 1.0 out."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from perfsuite.measure.rounds import InterleavedRounds
from perfsuite.measure.step_model import StepModel
from perfsuite.tools.diagnose import rewrite
from perfsuite.tools.diagnose.attribution import MIN_READ_S, MIN_READS, counted, read_rate
from perfsuite.tools.diagnose.plan import TARGET_ROUNDS, Stage, more_rounds_for, status_from, worst_status
from perfsuite.tools.diagnose.streams import Stream, buffered_elements
from perfsuite.tools.diagnose.targets import one_line_error
from perfsuite.verdict.diagnosis_figures import MIN_ROUNDS, TOO_SHORT, FixGain, RoundsEstimate, estimate
from perfsuite.workload.pipeline_model import Pipeline

SIDES = ("before", "after")  # a fix's sides, in the order of even measured rounds
GAIN_BOUNDARIES = (1.0,)  # a fix's gain is decided when its interval leaves 1.0 (no change) out


class NotApplicable(Exception):
    """A fix that cannot be applied to this pipeline; its message says why."""


class RewriteComparison:
    """A rewrite.Fix: the pipeline alone (drained before each read) or, with a step, the step fed by each side
    (a fresh iterator per read, its warm-up calls untimed, then calls for read_s and MIN_READS at least)."""

    warmup_rounds = 0

    def __init__(self, fix: rewrite.Fix, pipeline: Pipeline, spec: str, *, warmup: int,
                 step: StepModel | None):
        self.name, self.words, self.fix, self.pipeline = fix.name, fix.words, fix, pipeline
        self.spec, self.warmup, self.step = spec, warmup, step
        self.unit = "samples/s of the pipeline" if step is None else "steps/s of the step fed by the pipeline"
        self.sides, self.streams, self.drains = {}, {}, {}  # by side; streams and drains: the pipeline alone

    def prepare(self) -> None:
        try:
            fixed, ready = self.fix.build(self.pipeline)
            ready()
        except Exception as error:  # noqa: BLE001 -- a rewrite TensorFlow refuses: said, not raised
            raise NotApplicable(f"the rewrite failed: {one_line_error(error)}") from None
        self.sides = {"before": self.pipeline.dataset, "after": fixed}
        if self.step is None:
            sources = {name: counted(data, batched=True) for name, data in self.sides.items()}
            self.streams = {name: Stream(source, self.spec) for name, source in sources.items()}
            self.drains = {name: self.warmup + buffered_elements(source) for name, source in sources.items()}

    def rate(self, side: str, read_s: float) -> float:
        if self.step is None:
            return read_rate(self.streams[side], drain=self.drains[side], read_s=read_s, batched=True)
        stream = Stream(self.sides[side], self.spec)
        try:
            return self.step.calls(stream, warmup=self.warmup, count=MIN_READS, at_least_s=read_s).per_s
        finally:
            stream.close()

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()
        self.streams = {}


class FixRounds:
    """The fixes stage. make(stage) -> (the comparisons, the fixes not applied), called once; each pass splits
    its share across as many undecided fixes as it holds. A comparison has name, words, unit, warmup_rounds (a
    step tracing new shapes), prepare() (or NotApplicable), rate(side, read_s) and close()."""

    def __init__(self, make: Callable[[Stage], tuple[list, list[FixGain]]]):
        self.make, self.comparisons, self.refused = make, None, []
        self.values: dict[str, dict[str, list[float]]] = {}  # by fix and side

    def gain(self, name: str) -> RoundsEstimate | None:
        after, before = self.values[name]["after"], self.values[name]["before"]
        return estimate([a / b for a, b in zip(after, before)], GAIN_BOUNDARIES) if after else None

    def decided(self, name: str) -> bool:
        gain = self.gain(name)
        return gain is not None and gain.rounds >= MIN_ROUNDS and gain.decided

    def more_rounds(self) -> float:
        """Rounds more, over the undecided fixes, for each gain's interval to leave 1.0 out."""
        if self.comparisons is None:
            return float(MIN_ROUNDS)
        return sum(more_rounds_for(self.gain(c.name)) for c in self.comparisons if not self.decided(c.name))

    def figures(self) -> tuple[FixGain, ...]:
        return tuple(self.refused) + tuple(FixGain(name=c.name, words=c.words, applied=True, unit=c.unit,
                                                   gain=self.gain(c.name)) for c in self.comparisons or ())

    def run(self, stage: Stage) -> tuple[FixGain, ...]:
        if self.comparisons is None:
            self._prepare(stage)
        todo = [c for c in self.comparisons if not self.decided(c.name)]
        if not todo:
            stage.planned("every fix decided" if self.comparisons else "no fix perfsuite can apply")
            return self.figures()
        fit = min(len(todo), math.floor(stage.left_s() / (4 * MIN_READ_S * MIN_ROUNDS)))
        if not fit:
            stage.planned(f"{len(todo)} fix(es): no time left to measure them", TOO_SHORT)
            return self.figures()
        later = [c.name for c in todo[fit:]]
        todo, share_s = todo[:fit], stage.left_s() / fit
        names = ", ".join(c.name for c in todo)
        stage.planned(f"{len(todo)} fix(es) ({names}), before and after in alternating rounds"
                      + (f"; no time left for {', '.join(later)} in this pass" if later else ""))
        statuses = [TOO_SHORT] if later else []
        for index, comparison in enumerate(todo):
            statuses.append(self._measure(stage, comparison, share_s))
            share_s = max(share_s, stage.left_s() / max(1, len(todo) - index - 1))
        stage.status = worst_status(statuses)
        return self.figures()

    def _prepare(self, stage: Stage) -> None:
        comparisons, self.refused = self.make(stage)
        self.comparisons = []
        for comparison in comparisons:
            try:
                comparison.prepare()
            except NotApplicable as why:
                self.refused.append(FixGain(name=comparison.name, words=comparison.words, applied=False,
                                            why=str(why)))
            else:
                self.comparisons.append(comparison)
                self.values[comparison.name] = {side: [] for side in SIDES}

    def _measure(self, stage: Stage, comparison, share_s: float) -> str:
        values = self.values[comparison.name]
        read_s = max(MIN_READ_S, share_s / (TARGET_ROUNDS * 4))
        # the rounds go on from earlier passes' values and order; a warm-up round until one is measured
        rounds = InterleavedRounds({side: functools.partial(comparison.rate, side, read_s) for side in SIDES},
                                   warmup_rounds=0 if values["after"] else comparison.warmup_rounds,
                                   start=len(values["after"]), values=values, count_warmup=False)
        rounds.until_decided(lambda: self.decided(comparison.name), driver=stage.rounds_until_decided,
                             share_s=share_s, first_estimate_s=4 * read_s, what=f"{comparison.name}: ")
        return status_from(self.decided(comparison.name), len(values["after"]))

    def close(self) -> None:
        for comparison in self.comparisons or ():
            comparison.close()
