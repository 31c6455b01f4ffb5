"""diagnose's input-bound share (measure.input_bound.InputBoundRounds): a fresh iterator per side and round,
dropped in it (start-up in the untimed steps, teardown on measure.teardown's thread), the twin first."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator

from perfsuite.measure import stats
from perfsuite.measure.input_bound import InputBound, InputBoundRounds
from perfsuite.measure.rounds import fitting
from perfsuite.measure.step_model import StepModel
from perfsuite.tools.diagnose.plan import TARGET_ROUNDS, Stage, more_rounds_for, status_from
from perfsuite.verdict import diagnosis_figures as fig

MIN_STEP_BATCHES = 3  # timed steps per side of a round, at least ...
MAX_STEP_CALLS = 64  # ... and step calls per side of a first pass's round, at most (fast step: longer rounds)
MAX_STEP_CALLS_AGAIN = 16 * MAX_STEP_CALLS  # ... and of a second pass's round


def twin_of(batch):
    """The synthetic twin: ``batch`` repeated, a dataset with no input work."""
    from perfsuite._tensorflow import tensorflow

    return tensorflow().data.Dataset.from_tensors(batch).repeat()


def side_steps(left_s: float, call_s: float, *, warmup: int, most: int = MAX_STEP_CALLS) -> int:
    """Timed steps per side (MIN_STEP_BATCHES at least) such that TARGET_ROUNDS rounds of two sides, each
    ``warmup`` untimed steps and these, fit left_s at call_s per step (``most`` calls a side at most)."""
    return max(MIN_STEP_BATCHES, fitting(left_s / TARGET_ROUNDS, 2 * call_s, least=1, most=most) - warmup)


class InputBoundStage:
    """The step fed by ``dataset`` vs by ``twin``; call_s (the step's steady seconds a call) sizes the first
    pass's rounds, those measured a second's; fresh(dataset): a side's fresh iterator."""

    def __init__(self, step: StepModel, call_s: float, dataset, twin, *, warmup: int,
                 fresh: Callable[[object], Iterator]):
        self.call_s, self.warmup = call_s, warmup
        self.measurement = InputBoundRounds(step=step, dataset=dataset, warmup=warmup, twin=twin,
                                            batches=MIN_STEP_BATCHES, twin_first=True, fresh=fresh)

    def measured(self) -> InputBound | None:
        """The rounds so far; None before the first."""
        return self.measurement.result() if self.measurement.rounds else None

    def figure(self) -> fig.RoundsEstimate:
        """The share's estimate over the rounds so far (one at least)."""
        return fig.estimate(self.measured().shares, fig.INPUT_BOUND_BOUNDARIES)

    def decided(self) -> bool:
        return self.measured() is not None and self.figure().decided

    def more_rounds(self) -> float:
        return more_rounds_for(self.figure() if self.measured() is not None else None)

    def one_round(self, batches: int) -> None:
        self.measurement.batches = batches
        self.measurement.one_round()

    def run(self, stage: Stage) -> fig.InputBoundFigures | None:
        """One pass: rounds until the share is decided or the stage's share spent; all passes' figures."""
        warmup, so_far = self.warmup, self.measured()
        call_s = (self.call_s if so_far is None
                  else statistics.median(so_far.real_round_s + so_far.synthetic_round_s))
        batches = side_steps(stage.left_s(), call_s, warmup=warmup,
                             most=MAX_STEP_CALLS if so_far is None else MAX_STEP_CALLS_AGAIN)
        round_s = 2 * (warmup + batches) * call_s
        stage.planned(f"rounds of the synthetic twin and the pipeline, each a fresh iterator, {warmup} "
                      f"untimed + {batches} timed steps of about {call_s:.3g} s (about {round_s:.1f} s per "
                      "round), until the share is decided")
        stage.rounds_until_decided(lambda index: self.one_round(batches), decided=self.decided,
                                   first_estimate_s=round_s)
        stage.status = status_from(self.decided(), self.measurement.rounds)
        return self.figures()

    def figures(self) -> fig.InputBoundFigures | None:
        """The rounds so far (None before the first); the class of the share "undecided" while it is."""
        measured = self.measured()
        if measured is None:
            return None
        share = self.figure()
        label = stats.classify_input_bound(share.median)  # raises on a NaN median, decided or not
        label = label if share.decided else "undecided"
        return fig.InputBoundFigures(share=share, classification=label, t_real=measured.t_real,
                                     t_synthetic=measured.t_synthetic, real_round_s=measured.real_round_s,
                                     synthetic_round_s=measured.synthetic_round_s, batches=measured.batches,
                                     warmup=measured.warmup,
                                     wait=fig.estimate(measured.wait_shares, fig.INPUT_BOUND_BOUNDARIES))
