"""Named run profiles: how much data and how many rounds a benchmark run spends.

smoke: CI's pass over every benchmark (tiny corpus, few batches); it proves they run and
       produce metrics, not how fast anything is.
quick: the CI-sized measurement (≤ 10 minutes for ``pytest benchmarks/ -m "not selftest"`` on 2 cores;
       the self-test, ``-m selftest``, takes another ~1 min 40 s and runs on demand and nightly).
full:  the nightly sweep (more batch sizes and workers, more rounds).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class RunProfile:
    name: str
    corpus: str  # a perfsuite.corpus.PRESETS key
    model: str  # a perfsuite.model.MODEL_PRESETS key
    warmup_batches: int
    measure_batches: int  # steady-state batches per measurement round
    min_round_s: float  # a loader's round takes more batches until it lasts this long
    rounds: int  # interleaved A/B rounds for ratios
    batch_sizes: tuple[int, ...]
    workers: tuple[int, ...]  # -1 is AUTOTUNE
    step_calls: int  # steady-state calls per step measurement round
    step_batch_sizes: tuple[int, ...]
    precisions: tuple[str, ...]  # training-step precisions swept

    def as_dict(self) -> dict:
        return asdict(self)


PROFILES = {
    "smoke": RunProfile(name="smoke", corpus="tiny", model="tiny", warmup_batches=1, measure_batches=3, min_round_s=0.0,
                        rounds=2, batch_sizes=(16,), workers=(2,), step_calls=3, step_batch_sizes=(16,),
                        precisions=("fp32", "mixed_float16")),
    "quick": RunProfile(name="quick", corpus="default", model="default", warmup_batches=2, measure_batches=10, min_round_s=0.2,
                        rounds=5, batch_sizes=(16,), workers=(1, 2), step_calls=3, step_batch_sizes=(8, 16),
                        precisions=("fp32",)),
    "full": RunProfile(name="full", corpus="default", model="default", warmup_batches=4, measure_batches=32, min_round_s=0.5,
                       rounds=11, batch_sizes=(8, 16, 32, 64), workers=(1, 2, 4, -1), step_calls=20,
                       step_batch_sizes=(8, 16, 32), precisions=("fp32", "mixed_float16")),
}
