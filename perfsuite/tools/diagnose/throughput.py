"""The pipeline's steady throughput: rounds of batches read back to back from a fresh, drained iterator, their
content (padding, audio) read after the round (evenly spaced batches beyond ANALYSED_BYTES); the next round
first drains what the buffers can have refilled meanwhile (at its batch rate, at most what they hold)."""

from __future__ import annotations

import math
import statistics
import time

from perfsuite.measure.batch_spec import BatchLayout, leaves
from perfsuite.measure.rounds import fitting
from perfsuite.measure.speech import FrameCounter
from perfsuite.measure.stats import detect_cycle
from perfsuite.tools.diagnose.plan import TARGET_ROUNDS, Stage, more_rounds, status_from
from perfsuite.tools.diagnose.streams import Stream, samples_in, timed_next
from perfsuite.verdict import diagnosis_figures as fig

THROUGHPUT_PRECISION = 0.10  # throughput is decided when its interval lies within +-10 % of the median
MIN_THROUGHPUT_BATCHES = 4  # steady batches per throughput round, at least ...
MAX_THROUGHPUT_BATCHES = 256  # ... and at most
ANALYSED_BYTES = 256 * 2**20  # a round's batches kept for their content read after it: every one up to this


class ThroughputRounds:
    """Rounds of steady batches until the rate is known within THROUGHPUT_PRECISION; run() is one pass."""

    def __init__(self, dataset, spec: str, first_s: float, warmup_s: tuple[float, ...], *,
                 layout: BatchLayout, drain: int):
        self.dataset, self.spec, self.first_s, self.warmup_s = dataset, spec, first_s, warmup_s
        self.layout, self.frames, self.drain = layout, FrameCounter(layout=layout), drain
        self.unit, self.restarts, self.batches = "batches", 0, None  # batches: a round's, once a pass sets it
        self.rounds: list[list[float]] = []  # per round: its rate, then each batch's seconds
        self.audio: list[float] = []

    def _rate(self) -> fig.RoundsEstimate | None:
        return fig.estimate([r[0] for r in self.rounds]) if self.rounds else None

    def precise(self) -> bool:
        rate = self._rate()
        return (rate is not None and rate.rounds >= fig.MIN_ROUNDS
                and rate.high - rate.low <= 2 * THROUGHPUT_PRECISION * rate.median)

    def more_rounds(self) -> float:
        """Rounds more to know the rate within THROUGHPUT_PRECISION (plan.more_rounds)."""
        if len(self.rounds) < fig.MIN_ROUNDS:
            return float(fig.MIN_ROUNDS - len(self.rounds))
        rate = self._rate()
        return more_rounds(rate.rounds, rate.high - rate.low, 2 * THROUGHPUT_PRECISION * rate.median)

    def run(self, stage: Stage) -> fig.Throughput:
        # a second pass: its batches measured so far size its rounds; a first pass, the warm-up batches
        measured = [s for r in self.rounds for s in r[1:]] or self.warmup_s or [self.first_s]
        batch_s_estimate = statistics.median(measured)
        self.batches = batches = fitting(stage.left_s() / TARGET_ROUNDS, batch_s_estimate,
                                         least=MIN_THROUGHPUT_BATCHES, most=MAX_THROUGHPUT_BATCHES)
        round_s = batches * batch_s_estimate
        stage.planned(f"a fresh iterator, {self.drain} batches drained (warm-up and what its buffers hold), "
                      f"then rounds of {batches} steady batches, about {round_s:.1f} s each, until the rate "
                      f"is known to within ±{THROUGHPUT_PRECISION:.0%}")
        stream = Stream(self.dataset, self.spec, drain=self.drain)
        refilled = [0]  # batches the buffers may have refilled while the last round's batches were analysed

        def one_round(index: int) -> None:
            stream.drain(refilled[0])
            times, kept, samples, stride = [], [], 0, 1
            start = time.perf_counter()
            for position in range(batches):
                batch, seconds = timed_next(stream)
                count, self.unit = samples_in(batch)
                times.append(seconds)
                samples += count
                if not position:
                    stride = max(1, math.ceil(batches * _bytes(batch) / ANALYSED_BYTES))
                if position % stride == 0:
                    kept.append(batch)
            spent = time.perf_counter() - start
            rate = samples / spent
            self.rounds.append([rate, *times])
            analysed = time.perf_counter()
            self._analyse(kept, rate)
            analysed_s = time.perf_counter() - analysed
            refilled[0] = min(self.drain, math.ceil(analysed_s * batches / spent) + 1)

        stage.rounds_until_decided(one_round, decided=self.precise, first_estimate_s=round_s)
        stream.close()
        self.restarts += stream.restarts
        stage.status = status_from(self.precise(), len(self.rounds))
        return self.figures()

    def _analyse(self, kept: list, rate: float) -> None:
        """The kept batches' frames; the round's audio seconds a second: its rate x their audio a sample."""
        noted, seen = len(self.frames.real), 0
        for batch in kept:
            seen += self.frames(batch)
        if len(self.frames.real) == noted + len(kept) and seen:  # every kept batch had the layout's audio
            self.audio.append(rate * sum(self.frames.real[noted:]) * self.layout.frame_s / seen)

    def figures(self) -> fig.Throughput:
        rounds, frames = self.rounds, self.frames
        batch_s = tuple(s for r in rounds for s in r[1:])
        variation = [statistics.pstdev(r[1:]) / statistics.fmean(r[1:]) for r in rounds]
        audio = rounds and len(self.audio) == len(rounds)
        return fig.Throughput(first_batch_s=self.first_s, warmup_s=self.warmup_s, unit=self.unit,
                              rate=self._rate(), batches_per_round=self.batches or 0, batch_s=batch_s,
                              variation=fig.estimate(variation, fig.VARIATION_BOUNDARIES) if rounds else None,
                              round_batches=tuple(len(r) - 1 for r in rounds), restarts=self.restarts,
                              cycle=detect_cycle(batch_s) if batch_s else None,
                              audio_s_per_s=fig.estimate(self.audio) if audio else None,
                              padding_efficiency=sum(frames.real) / sum(frames.padded) if frames.padded else None,
                              padding=frames.figures())


def _bytes(batch) -> int:
    """A batch's bytes from its components' shapes and dtypes (one whose shape is not known counts 0)."""
    total = 0
    for _, value in leaves(batch):
        shape, dtype = tuple(getattr(value, "shape", ()) or ()), getattr(value, "dtype", None)
        size = getattr(dtype, "size", None) or getattr(dtype, "itemsize", 0)
        if None not in shape:
            total += math.prod(int(d) for d in shape) * int(size or 0)
    return total
