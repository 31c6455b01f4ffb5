"""This machine's float-op peak, measured: a dense float32 matmul in a tf.function, timed in rounds with a
readback, so diagnose can say how close a pipeline's or a step's achieved float-op rate runs to the rate
this machine reaches on the kernel it runs best. A measured figure of the machine as it is now (its
state moves it like any timing), not a datasheet peak; the work it is set against comes from
measure/work.py, whose float-op counts are the same on every machine."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from perfsuite._tensorflow import tensorflow
from perfsuite.measure.rounds import interleaved
from perfsuite.measure.stats import median_interval
from perfsuite.measure.step_model import StepModel
from perfsuite.records import Record

MATMUL_SIZES = (512, 1024)  # square float32 matrices: the kernel's steady rate differs by size; the best counts


@dataclass(frozen=True)
class PeakRate(Record):
    """Float ops per second of the reference matmul: the median over rounds, its interval, the rounds, and
    what was timed (in words)."""

    float_ops_per_s: float
    low: float
    high: float
    rounds: int
    kernel: str

    def share(self, float_ops_per_s: float) -> float:
        """An achieved rate as a share of this peak's median."""
        return float_ops_per_s / self.float_ops_per_s


def measure_peak(*, rounds: int = 5, calls: int = 8, sizes: tuple[int, ...] = MATMUL_SIZES) -> PeakRate:
    """The best of matmul_rate at each size (the highest median): a peak is the most this machine reaches."""
    if not sizes:
        raise ValueError("sizes: expected at least one matrix size, found none")
    return max((matmul_rate(rounds=rounds, calls=calls, size=size) for size in sizes),
               key=lambda rate: rate.float_ops_per_s)


def matmul_rate(*, rounds: int, calls: int, size: int) -> PeakRate:
    """Time `calls` matmuls of two size x size float32 matrices per round, after one untimed call (trace);
    each round's rate is 2 size^3 float ops per call over its seconds."""
    if rounds < 1 or calls < 1 or size < 1:
        raise ValueError(f"rounds, calls, size: expected integers >= 1, found {rounds}, {calls}, {size}")
    tf = tensorflow()
    a = tf.random.stateless_normal((size, size), seed=(1, 2))
    b = tf.random.stateless_normal((size, size), seed=(3, 4))
    model = StepModel(tf.function(lambda pair: tf.reduce_sum(tf.linalg.matmul(*pair))), name="matmul")
    model.call_s((a, b))  # its trace

    def one_round() -> float:  # calls within one timed round, not rounds
        return 2 * size ** 3 * model.calls(itertools.repeat((a, b)), count=calls).per_s

    rates = interleaved({"matmul": one_round}, rounds=rounds)[0]["matmul"]
    interval = median_interval(rates)
    return PeakRate(float_ops_per_s=interval.median, low=interval.low, high=interval.high, rounds=len(rates),
                    kernel=f"float32 matmul {size}x{size} in a tf.function, {calls} calls a round")
