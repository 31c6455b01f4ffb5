"""The one round engine: the order of interleaved runs within a round, planned rounds, and rounds added
until a figure is decided within a time limit. Every measurement in rounds runs them through here.

InterleavedRounds is the engine callers hand their runs to (by label, with an order and warm-up rounds):
one_round() runs each of them, or the subset still wanted, once in that round's order and keeps each
result under its label; until_decided() adds rounds until the caller's test of "decided" holds. No caller
writes a round's alternation itself (tests/test_rounds.py holds that).

alternating() is the order interleaved measurements use (the fixture's compare, through timing.ab_runs,
input_bound, the emulated contrasts, diagnose's stages, perfsuite ab's controller): forwards on even rounds,
backwards on odd ones (A B C, C B A, ...), so over a pair of rounds every run sits at the same mean position
and a steady drift cancels. rotated() (the self-test's arms, levels and trials) also puts every run in every
position equally often, over 2 x len(labels) rounds. A round's order comes from its index, counted from the
first round of the measurement (warm-up rounds included, unless the caller counts measured rounds only), so
rounds added later continue the alternation.
planned() runs a fixed number of rounds, through a timing instrument where one is given (pytest-benchmark's
pedantic, through pytest_plugin/benchmark_adapter); interleaved() runs several runs once per round in
an order. until_decided() adds rounds while a figure is undecided (the fixture's undecided gates, ratio
gates included, diagnose's stages, perfsuite ab's controller): a round is started only where it fits the
limit at the longest round so far, so the limit is kept. RoundsOutcome.note is what a summary says when
they ended with the figure undecided, the same words wherever a budget runs out.

RoundDriver is the one seam for rounds driven from outside: `perfsuite ab`'s worker (pytest_plugin/ab_worker)
gives the fixture one through the plugin's hook (pytest_plugin/hooks.py), and its controller asks for each
round, deciding when to stop from both sides at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from perfsuite.records import Record

T = TypeVar("T")

DECIDED, BUDGET_SPENT, MAX_ROUNDS_REACHED = "decided", "budget spent", "max_rounds reached"


def alternating(labels: Sequence[T], index: int) -> tuple[T, ...]:
    """The order of round `index` (0 first): labels forwards on even rounds, backwards on odd ones."""
    return tuple(labels) if index % 2 == 0 else tuple(labels)[::-1]


def rotated(labels: Sequence[T], index: int) -> tuple[T, ...]:
    """The order of round `index`: every rotation of labels in turn, forwards, then every one backwards."""
    labels = tuple(labels)
    shift = index % len(labels)
    order = labels[shift:] + labels[:shift]
    return order if (index // len(labels)) % 2 == 0 else order[::-1]


class RoundDriver(Protocol):
    """Rounds driven from outside the run profile's budget: the fixture's (pytest_plugin.recorder) measurements,
    once warmed up, hand their rounds to it; its figures come back as the rounds' results. Implemented by
    perfsuite ab's worker (pytest_plugin.ab_worker.RoundDriver), and where the budget decides by the
    fixture's own (pytest_plugin.recorder.AloneRounds), so the fixture asks one driver either way.

    rounds(one_round, side=...): the results of one_round() for each round it runs (measure_dataset,
    measure_step; ``side`` names what they measure, as Recorder.measure_dataset says). pairs(a, b, name=...,
    sides=...): a compare's interleaved rounds of a and b as a timing.ABResult (A's speed over B's)."""

    def rounds(self, one_round: Callable[[], T], *, side: str | None = None) -> list[T]: ...

    def pairs(self, a: Callable[[], Any], b: Callable[[], Any], *, name: str,
              sides: tuple[str, str] | None = None) -> Any: ...


def fitting(budget_s: float, each_s: float, *, least: int, most: int) -> int:
    """How many rounds (or calls) of ``each_s`` seconds fit ``budget_s``, within [least, most]; most where
    each_s is not > 0 (nothing says what one costs). The planned count of the fixture's rounds
    (RunProfile.rounds_for); diagnose's calls per round (plan.calls_that_fit) ask the same."""
    count = int(min(budget_s // each_s, most)) if each_s > 0 else most  # a tiny each_s: inf, not an int
    return max(least, min(most, count))


def planned(one_round: Callable[[int], T], rounds: int, *, start: int = 0,
            instrument: Callable[[Callable[[], None], int], Any] | None = None) -> list[T]:
    """`rounds` rounds, one_round(index) for index start, start + 1, ...; their results in order.
    instrument(target, rounds), where given, runs the rounds and times each itself (pytest-benchmark's
    pedantic); those it did not run (a disabled pytest-benchmark runs the target once) are run here."""
    if rounds < 0 or start < 0:
        raise ValueError(f"rounds, start: expected >= 0 and >= 0, found {rounds} and {start}")
    results: list[T] = []

    def target() -> None:
        results.append(one_round(start + len(results)))

    if instrument is not None and rounds > 0:
        instrument(target, rounds)
    while len(results) < rounds:
        target()
    return results


def interleaved(runs: Mapping[Any, Callable[[], T]], *, rounds: int, warmup_rounds: int = 0,
                order: Callable[[Sequence, int], tuple] = alternating,
                start: int = 0) -> tuple[dict[Any, list[T]], list[tuple]]:
    """Every run once per round in `order` (alternating or rotated), warm-up rounds first (in that order,
    their results discarded). ``start``: the index of the first round (warm-up included) in the
    measurement's order, for rounds that continue earlier ones. Returns ({label: its result per measured
    round}, each measured round's order)."""
    if rounds < 1 or warmup_rounds < 0:
        raise ValueError(f"rounds, warmup_rounds: expected >= 1 and >= 0, found {rounds} and {warmup_rounds}")
    if not runs:
        raise ValueError("runs: expected at least one callable, found none")
    engine = InterleavedRounds(runs, order=order, warmup_rounds=warmup_rounds, start=start)
    engine.run(warmup_rounds + rounds)
    return engine.values, engine.orders


class InterleavedRounds(Generic[T]):
    """The round engine: ``runs`` ({label: run()}) each run once per round, in ``order`` (alternating or
    rotated) of the labels given, the first ``warmup_rounds`` rounds a warm-up.

    one_round(labels) runs the labels given (default: every run, in the order of ``runs``; a subset, e.g.
    the runs still undecided, keeps the order of the labels as given) once each, in the order of round
    ``index``, and returns {label: result} in the order they ran. A measured round's results are appended
    to ``values[label]`` and its order to ``orders``; a warm-up round's go to ``warmups[label]`` instead.
    ``index`` is the index of the round now running (during a run) or next to run: ``start`` for the
    first, one more per round, across every call of one_round, run and until_decided, so rounds added
    later (a second pass) continue the alternation. ``values``: earlier rounds' results by label, for an
    engine whose runs are made afresh for rounds that continue them (appended to in place; give
    ``start`` too). ``count_warmup``: False where a round's order counts measured rounds only (a warm-up
    round takes the order of the first measured round after it)."""

    def __init__(self, runs: Mapping[Any, Callable[[], T]], *, order: Callable[[Sequence, int], tuple] = alternating,
                 warmup_rounds: int = 0, start: int = 0, values: dict[Any, list[T]] | None = None,
                 count_warmup: bool = True):
        if warmup_rounds < 0 or start < 0:
            raise ValueError(f"warmup_rounds, start: expected >= 0 and >= 0, found {warmup_rounds} and {start}")
        self.runs: dict[Any, Callable[[], T]] = dict(runs)
        self.order, self.warmup_rounds, self.start, self.count_warmup = order, warmup_rounds, start, count_warmup
        self.values: dict[Any, list[T]] = {label: [] for label in self.runs} if values is None else values
        for label in self.runs:
            self.values.setdefault(label, [])
        self.warmups: dict[Any, list[T]] = {label: [] for label in self.runs}
        self.orders: list[tuple] = []
        self.index = start

    @property
    def rounds_run(self) -> int:
        """Rounds this engine ran, warm-up included."""
        return self.index - self.start

    @property
    def warming_up(self) -> bool:
        """Whether round ``index`` (the one running, or next to run) is a warm-up round."""
        return self.rounds_run < self.warmup_rounds

    @property
    def warmup_left(self) -> int:
        """Warm-up rounds still to run."""
        return max(0, self.warmup_rounds - self.rounds_run)

    def sequence(self, labels: Sequence | None = None) -> tuple:
        """The order round ``index`` runs ``labels`` in (default: every run)."""
        labels = tuple(self.runs) if labels is None else tuple(labels)
        unknown = [label for label in labels if label not in self.runs]
        if unknown:
            raise KeyError(f"labels: expected runs of {tuple(self.runs)}, found {unknown}")
        measured = max(0, self.rounds_run - self.warmup_rounds)
        return self.order(labels, self.index if self.count_warmup else self.start + measured)

    def one_round(self, labels: Sequence | None = None) -> dict[Any, T]:
        """One round: each of ``labels`` (default: every run) once, in this round's order; {label: result}."""
        sequence = self.sequence(labels)
        results = {label: self.runs[label]() for label in sequence}
        kept = self.warmups if self.warming_up else self.values
        for label in sequence:
            kept.setdefault(label, []).append(results[label])
        if not self.warming_up:
            self.orders.append(sequence)
        self.index += 1
        return results

    def run(self, rounds: int, *, labels: Sequence | None = None,
            instrument: Callable[[Callable[[], None], int], Any] | None = None) -> list[dict[Any, T]]:
        """``rounds`` rounds (planned(); warm-up rounds still to run among them); each round's results."""
        return planned(lambda index: self.one_round(labels), rounds, start=self.index, instrument=instrument)

    def until_decided(self, decided: Callable[[], bool], *,
                      labels: Sequence | Callable[[], Sequence] | None = None,
                      driver: Callable[..., Any] | None = None, **options) -> Any:
        """Rounds until decided() holds or the limit is reached: ``driver(one_round, decided=decided,
        warmup_rounds=<warm-up rounds still to run>, **options)``, by default rounds.until_decided (options:
        its limit_s, max_rounds, ...; a diagnose Stage's rounds_until_decided takes its own). ``labels``:
        the runs of each round, or a callable asked before each round (the runs still undecided).
        Returns what driver returns (a RoundsOutcome)."""
        def one_round(index: int) -> None:
            self.one_round(labels() if callable(labels) else labels)

        return (driver or until_decided)(one_round, decided=decided, warmup_rounds=self.warmup_left, **options)


@dataclass(frozen=True)
class RoundsOutcome(Record):
    """How until_decided() ended. rounds: measured rounds in all (the planned ones included, warm-up not);
    added: those it measured; stopped: DECIDED, BUDGET_SPENT or MAX_ROUNDS_REACHED; seconds: the planned rounds'
    time plus its own (warm-up included); limit_s: the time allowed; round_s: the longest measured round
    it ran (before any: the warm-up round, else the estimate it started from; None without either)."""

    rounds: int
    added: int
    stopped: str
    seconds: float
    limit_s: float
    round_s: float | None = None

    @property
    def decided(self) -> bool:
        return self.stopped == DECIDED

    @property
    def note(self) -> str | None:
        """What a summary says when the rounds ended with a figure undecided; None when decided."""
        if self.decided:
            return None
        return (f"{self.stopped} with a gate still inconclusive after {self.rounds} rounds "
                f"({self.added} added, {self.seconds:.1f} s of at most {self.limit_s:.1f} s)")


def until_decided(one_round: Callable[[int], Any], *, decided: Callable[[], bool], limit_s: float, max_rounds: int,
                  min_rounds: int = 0, planned: int = 0, planned_s: float = 0.0, warmup_rounds: int = 0,
                  step: int = 1, first_estimate_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                  on_round: Callable[[int, float], None] = lambda rounds, seconds: None,
                  fit: bool = True, next_step_s: Callable[[], float] | None = None) -> RoundsOutcome:
    """Call one_round(index) for index 0, 1, ... (the first warmup_rounds are warm-up: the caller discards
    their figures), `step` measured rounds at a time, until decided() holds with at least min_rounds
    measured, or the next step would pass max_rounds, or would end after limit_s at the longest round so
    far. planned rounds that took planned_s were measured before (they count, and their mean round
    estimates the first step). With no estimate at all the first round runs if any time is left, since
    nothing else can tell what a round costs. on_round(measured rounds, seconds) follows every round.
    fit=False: a step starts while any time is left (limit_s bounds when the last one starts, not when it
    ends: a search that narrows with every round, whose answer is only wider where it stops early).
    next_step_s(): the next step's seconds as the caller expects them, where it knows better than the longest
    round so far (rounds of different runs: the self-test's trials)."""
    if step < 1 or planned < 0 or not planned_s >= 0:
        raise ValueError(f"step, planned, planned_s: expected >= 1, >= 0 and >= 0 s, found {step}, {planned}, "
                         f"{planned_s}")
    start, index, durations = clock(), 0, []
    estimate_s = planned_s / planned if planned else first_estimate_s

    def measured() -> int:
        return planned + max(0, index - warmup_rounds)

    while True:
        if measured() >= min_rounds and index >= warmup_rounds and decided():
            stopped = DECIDED
            break
        next_step = step if index >= warmup_rounds else 1
        if index >= warmup_rounds and measured() + next_step > max_rounds:
            stopped = MAX_ROUNDS_REACHED
            break
        elapsed = planned_s + clock() - start
        step_s = next_step * estimate_s if estimate_s is not None else None
        if next_step_s is not None:
            step_s = next_step_s()
        if limit_s <= elapsed or (fit and step_s is not None and elapsed + step_s > limit_s):
            stopped = BUDGET_SPENT
            break
        for _ in range(next_step):
            began = clock()
            one_round(index)
            took = clock() - began
            index += 1
            if index > warmup_rounds:
                durations.append(took)
            estimate_s = max(durations) if durations else took
            on_round(measured(), planned_s + clock() - start)
    return RoundsOutcome(rounds=measured(), added=measured() - planned, stopped=stopped,
                         seconds=planned_s + clock() - start, limit_s=limit_s, round_s=estimate_s)
