"""The input-bound share: how much of a step's time is spent waiting for its input pipeline.

Measured as TensorFlow's profiler classifies it: the same step fed by the real pipeline and by its
synthetic twin (one batch of the same structure repeated: no input work), in rounds that alternate
which side runs first, so a drift of the machine's speed reaches both alike. A side of the first round
runs ``warmup`` untimed steps (tracing the step, starting the pipeline), a side of a later round
``settle`` (draining the prefetch buffer that refilled while the other side ran, or letting that refill
finish before the synthetic side is timed); then it times ``batches`` steps with their fetches (or
as many as last ``round_s``, sized once by the synthetic side's last warm-up step). Its
figure is the mean seconds per step, not a median: a pipeline that stalls every few batches costs
exactly its stalls. The share of a round is 1 - t_synthetic / t_real (``stats.input_bound_share``).

The same rounds time the real side's fetches apart: the wait share of a round is the part of its
steps' time spent in ``next()`` on the pipeline, what the profiler reports as input time. The two
differ on a CPU-only machine, where the pipeline's threads also take CPU from the step: the share
counts that contention, the wait share only the step left waiting. The wait share is read within
one side, not as a difference of two noisy sides, so it decides in fewer rounds.

``InputBoundRounds`` runs one round at a time (its sides through the round engine,
rounds.InterleavedRounds), so a caller can add rounds while a gate on the share is undecided;
``measure_input_bound`` runs a fixed number. The result, ``InputBound``, is one frozen record. It is the one
input-bound measurement: the fixture's (pytest_plugin/recorder.py, which the benchmarks use) and diagnose's
on both its paths (tools/diagnose/input_bound.py: a dataset's loaders and --pipeline), the latter with its
options: a fresh iterator per side and round, its own twin (a batch it read, repeated), the twin first.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from perfsuite._tensorflow import tensorflow
from perfsuite.measure import stats
from perfsuite.measure.rounds import InterleavedRounds, planned
from perfsuite.measure.step_model import Calls, StepModel
from perfsuite.measure.teardown import iterate
from perfsuite.records import Record


@dataclass(frozen=True)
class InputBound(Record):
    """The step fed by the real pipeline and by the synthetic twin in the same rounds.

    real_round_s, synthetic_round_s: each round's mean seconds per step of each side; t_real,
    t_synthetic: their medians; share = 1 - t_synthetic / t_real, classified as TF's profiler does
    (stats.classify_input_bound); shares: each round's own share (what a gate's interval is decided
    from). wait_round_s: each round's mean seconds per real step spent fetching its batch; wait_shares:
    each round's wait_round_s / real_round_s, wait_share their median. batches: timed steps per side
    and round, after warmup untimed ones in the first round and settle in each later one. Its dict form
    adds shares as round_shares, wait_shares as round_wait_shares, and wait_share.
    """

    DERIVED: ClassVar[tuple[str, ...]] = ("round_shares", "wait_share", "round_wait_shares")

    t_real: float
    t_synthetic: float
    share: float
    classification: str
    rounds: int
    real_round_s: tuple[float, ...]
    synthetic_round_s: tuple[float, ...]
    wait_round_s: tuple[float, ...]
    batches: int
    warmup: int
    settle: int

    @classmethod
    def from_rounds(cls, real_round_s, synthetic_round_s, wait_round_s, *, batches: int,
                    warmup: int, settle: int) -> InputBound:
        real, synthetic = tuple(map(float, real_round_s)), tuple(map(float, synthetic_round_s))
        wait = tuple(map(float, wait_round_s))
        if not real or not len(real) == len(synthetic) == len(wait):
            raise ValueError(f"rounds: expected the same number (≥ 1) of real, synthetic and wait rounds, found "
                             f"{len(real)}, {len(synthetic)} and {len(wait)}")
        t_real, t_synthetic = statistics.median(real), statistics.median(synthetic)
        share = stats.input_bound_share(t_synthetic=t_synthetic, t_real=t_real)
        return cls(t_real=t_real, t_synthetic=t_synthetic, share=share,
                   classification=stats.classify_input_bound(share), rounds=len(real), real_round_s=real,
                   synthetic_round_s=synthetic, wait_round_s=wait, batches=batches, warmup=warmup,
                   settle=settle)

    @property
    def shares(self) -> tuple[float, ...]:
        return tuple(stats.input_bound_share(t_synthetic=s, t_real=r)
                     for r, s in zip(self.real_round_s, self.synthetic_round_s))

    @property
    def wait_shares(self) -> tuple[float, ...]:
        return tuple(w / r for w, r in zip(self.wait_round_s, self.real_round_s))

    @property
    def wait_share(self) -> float:
        return statistics.median(self.wait_shares)

    round_shares, round_wait_shares = shares, wait_shares  # the names its dict form gives them


class _Endless:
    """An iterator that names the dataset and the batches taken when it runs dry."""

    def __init__(self, dataset, name: str):
        self._iterator, self._name, self.taken = iterate(dataset), name, 0

    def __iter__(self):
        return self

    def __next__(self):
        try:
            item = next(self._iterator)
        except StopIteration:
            raise ValueError(f"{self._name}: the dataset ended after {self.taken} batches; expected one that "
                             "never ends (dataset.repeat()), as rounds are added while a gate is undecided") from None
        self.taken += 1
        return item


REAL, SYNTHETIC = "real", "synthetic"  # the sides, InputBoundRounds' labels in its round engine


class InputBoundRounds:
    """The rounds of one input-bound measurement: ``one_round()`` adds one, ``result()`` is the figure so
    far. ``dataset``: a tf.data.Dataset (its synthetic twin is dataset.take(1).cache().repeat()), repeated
    so that it never ends. ``settle``: untimed steps per side after the first round (default: ``warmup``).
    ``round_s``: when above 0, each side times at least ``batches`` steps, more until they last this long,
    sized before the first round by the synthetic twin's ``warmup`` steps, its last one timed (that side
    then settles instead of warming up in the first round). The steps are timed by a StepModel named
    ``name``; ``readback(output)`` forces the step's completion (default: the StepModel's, one element of
    every output tensor back to the host). ``step`` may be a StepModel already made (name and readback are
    then its own, and its traces count over these rounds too).

    The sides run through the round engine (rounds.InterleavedRounds), alternating: the real side first in
    even rounds and last in odd ones, or the twin first with ``twin_first``. By default each side reads one
    iterator for the whole measurement (its rounds continue it). ``fresh``: a callable making an iterator
    of a dataset, for a fresh iterator per side and round instead (made right before the side, closed
    inside it: its close() called, where it has one, and dropped), its start-up in the side's untimed
    steps (``warmup`` in the first round, ``settle`` in later ones); the dataset need not then be endless.
    ``twin``: the synthetic side's dataset instead of the default (e.g. a batch already read, repeated).
    ``batches`` may be changed between rounds (a later pass's rounds sized afresh); ``calls`` counts the
    step's calls, untimed ones included."""

    def __init__(self, *, step: Callable[[Any], Any] | StepModel, dataset, warmup: int, batches: int,
                 settle: int | None = None, round_s: float = 0.0, readback: Callable[[Any], Any] | None = None,
                 name: str = "input_bound", fresh: Callable[[Any], Iterator] | None = None, twin=None,
                 twin_first: bool = False):
        settle = warmup if settle is None else settle
        for key, value, least in (("warmup", warmup, 0), ("settle", settle, 0), ("batches", batches, 1)):
            _check_count(key, value, least)
        if not (isinstance(round_s, (int, float)) and not isinstance(round_s, bool) and 0 <= round_s < math.inf):
            raise ValueError(f"round_s: expected a finite number of seconds >= 0, found {round_s!r}")
        tf = tensorflow()
        if twin is None and not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"dataset: expected a tf.data.Dataset (for its synthetic twin), found "
                            f"{type(dataset).__name__}")
        self._step = step if isinstance(step, StepModel) else StepModel(step, name=name, readback=readback)
        self._warmup, self._settle, self._batches = warmup, settle, batches
        self._round_s, self._fresh, self._sized = round_s, fresh, False
        twin = dataset.take(1).cache().repeat() if twin is None else twin
        self._datasets = {REAL: dataset, SYNTHETIC: twin}
        self._iterators = {} if fresh else {REAL: _Endless(dataset, name),
                                            SYNTHETIC: _Endless(twin, f"{name} (synthetic twin)")}
        sides = (SYNTHETIC, REAL) if twin_first else (REAL, SYNTHETIC)
        self._rounds = InterleavedRounds({side: functools.partial(self._side, side) for side in sides})
        self.calls = 0

    @property
    def batches(self) -> int:
        """Timed steps per side and round (from the next round on, where changed)."""
        return self._batches

    @batches.setter
    def batches(self, batches: int) -> None:
        _check_count("batches", batches, 1)
        self._batches = batches

    @property
    def rounds(self) -> int:
        """Rounds measured (both sides run)."""
        return min(len(self._rounds.values[REAL]), len(self._rounds.values[SYNTHETIC]))

    def _size(self) -> None:
        """The synthetic twin's warm-up steps (the step's trace and compile), the last one timed; the timed
        steps per side become the fewest that last ``round_s``, ``batches`` at least."""
        step_s = self._calls(SYNTHETIC, untimed=max(self._warmup - 1, 0), count=1).per_call_s
        self._batches = max(self._batches, math.ceil(self._round_s / step_s))
        self._sized = True

    def _side(self, side: str) -> Calls:
        """One side of this round: its untimed steps (warmup in the first round, settle after, or where
        _size warmed the synthetic side's iterator up), then ``batches`` timed ones, each with its fetch."""
        warm = self._rounds.index > 0 or (self._sized and side == SYNTHETIC and not self._fresh)
        return self._calls(side, untimed=self._settle if warm else self._warmup, count=self._batches)

    def _calls(self, side: str, *, untimed: int, count: int) -> Calls:
        """The step fed by the side's iterator (a fresh one, closed here, with ``fresh``)."""
        iterator = self._fresh(self._datasets[side]) if self._fresh else self._iterators[side]
        calls = self._step.calls(iterator, warmup=untimed, count=count)
        self.calls += untimed + calls.count
        if self._fresh:
            getattr(iterator, "close", lambda: None)()
            del iterator  # closed here, inside the round, not later in someone else's
        return calls

    def one_round(self) -> None:
        """One round: both sides, in the round engine's alternating order."""
        if self._rounds.index == 0 and self._round_s > 0:
            self._size()
        self._rounds.one_round()

    def result(self) -> InputBound:
        """The figure of the rounds measured (a round whose second side never ran left out)."""
        real, synthetic = (self._rounds.values[side][:self.rounds] for side in (REAL, SYNTHETIC))
        return InputBound.from_rounds([c.per_call_s for c in real], [c.per_call_s for c in synthetic],
                                      [c.fetch_per_call_s for c in real], batches=self._batches,
                                      warmup=self._warmup, settle=self._settle)


def _check_count(key: str, value, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{key}: expected an integer >= {least}, found {value!r}")


def measure_input_bound(*, step: Callable[[Any], Any], dataset, warmup: int, batches: int, rounds: int = 3,
                        settle: int | None = None, readback: Callable[[Any], Any] | None = None,
                        name: str = "input_bound") -> InputBound:
    """The input-bound share from ``rounds`` alternating rounds (see the module notes)."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds: expected an integer >= 1, found {rounds!r}")
    measurement = InputBoundRounds(step=step, dataset=dataset, warmup=warmup, batches=batches, settle=settle,
                                   readback=readback, name=name)
    planned(lambda index: measurement.one_round(), rounds)
    return measurement.result()
