"""Named run profiles: how much data a benchmark run uses and how much time each measurement spends.

Budgets are time, not counts: a benchmark takes rounds until its ``budget_s`` of measuring is spent,
never fewer than ``min_rounds`` (below that its interval means nothing) nor more than ``max_rounds``.
A slower machine takes fewer rounds of the same budget instead of paying proportionally; the figures
say how many rounds were taken. Warm-up, trace and compile are outside the budget.

smoke: CI's pass over every benchmark: they run and produce metrics, not how fast anything is.
quick: the CI-sized measurement (``pytest benchmarks/ -m "not selftest"``; its wall time per machine is in
       docs/measurement.md): loaders at batch 16 over 1 and 2 workers, the step's modes at batch 8.
full:  the nightly sweep (more batch sizes and workers, larger budgets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfsuite.measure.rounds import fitting
from perfsuite.records import Record


@dataclass(frozen=True)
class RunProfile(Record):
    name: str
    corpus: str  # a perfsuite.data.corpus.PRESETS key
    model: str  # a perfsuite.workload.model.MODEL_PRESETS key
    warmup_batches: int
    measure_batches: int  # steady batches per loader round (at least; see min_round_s)
    min_round_s: float  # a round takes more batches (or step calls) until it lasts this long
    step_calls: int  # steady calls per step round, at least (see calls_per_round)
    budget_s: float  # measuring time per benchmark (per side of an interleaved comparison)
    min_rounds: int
    max_rounds: int
    batch_sizes: tuple[int, ...]
    workers: tuple[int, ...]  # -1 is AUTOTUNE
    step_batch_sizes: tuple[int, ...]
    precisions: tuple[str, ...]  # training-step precisions swept

    def __post_init__(self):
        if not 2 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"profile {self.name}: expected 2 <= min_rounds <= max_rounds, "
                             f"found {self.min_rounds} and {self.max_rounds}")

    def rounds_for(self, round_s: float) -> int:
        """Rounds of ``round_s`` seconds each that fit the budget, within [min_rounds, max_rounds]."""
        return fitting(self.budget_s, round_s, least=self.min_rounds, most=self.max_rounds)

    def calls_per_round(self, call_s: float) -> int:
        """Steady calls of a ``call_s``-second step per round: at least ``step_calls``, more until the round
        lasts ``min_round_s`` (a millisecond GPU step gets rounds a timer reads well, a CPU step of seconds
        pays one call a round)."""
        if not call_s > 0:
            return self.step_calls
        return max(self.step_calls, math.ceil(self.min_round_s / call_s))

    @property
    def step_warmup_calls(self) -> int:
        """Untimed calls of a step before the one that sizes its rounds: its first (trace and compile) and
        ``warmup_batches`` - 2 more. The sizing call is in no round, so it is the last warm-up call."""
        return max(self.warmup_batches - 1, 1)


PROFILES = {
    "smoke": RunProfile(name="smoke", corpus="tiny", model="tiny", warmup_batches=1, measure_batches=3,
                        min_round_s=0.0, step_calls=2, budget_s=0.5, min_rounds=2, max_rounds=2,
                        batch_sizes=(16,), workers=(2,), step_batch_sizes=(8,), precisions=("fp32", "mixed_float16")),
    "quick": RunProfile(name="quick", corpus="default", model="default", warmup_batches=2, measure_batches=8,
                        min_round_s=0.2, step_calls=1, budget_s=4.0, min_rounds=5, max_rounds=15,
                        batch_sizes=(16,), workers=(1, 2), step_batch_sizes=(8,), precisions=("fp32",)),
    "full": RunProfile(name="full", corpus="default", model="default", warmup_batches=4, measure_batches=32,
                       min_round_s=0.5, step_calls=10, budget_s=30.0, min_rounds=7, max_rounds=41,
                       batch_sizes=(8, 16, 32, 64), workers=(1, 2, 4, -1), step_batch_sizes=(8, 16, 32),
                       precisions=("fp32", "mixed_float16")),
}
