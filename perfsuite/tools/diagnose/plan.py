"""A diagnosis's time budget, its stages and their rounds, progress events, and the checkpointed stage log."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from perfsuite.measure.rounds import RoundsOutcome, until_decided
from perfsuite.verdict import diagnosis_figures as fig

TARGET_ROUNDS = 6  # rounds are sized so that this many fit a share: the range of 6 covers the median at 97 %


def split_budget(total_s: float, needs: Mapping[str, float]) -> dict[str, float]:
    """total_s (0 if negative) split across the stages in proportion to needs (weights > 0), in its order."""
    for name, need in needs.items():
        if not need > 0:
            raise ValueError(f"needs[{name!r}]: expected a weight > 0, found {need!r}")
    weight = sum(needs.values())
    return {name: max(total_s, 0.0) * need / weight for name, need in needs.items()}


def status_from(decided: bool, rounds: int) -> str:
    """A stage's status from all its rounds (both passes of a resumed stage)."""
    if decided:
        return fig.DECIDED
    return fig.TOO_SHORT if rounds < fig.MIN_ROUNDS else fig.UNDECIDED


def status_of(outcome: RoundsOutcome) -> str:
    return status_from(outcome.decided, outcome.rounds)


def more_rounds(rounds: int, width: float, allowed: float) -> float:
    """Rounds more (at least 1, MIN_ROUNDS in all) to narrow an interval of `width` over `rounds` rounds to
    `allowed`, as a median's interval narrows as 1/sqrt(rounds); inf when allowed <= 0 (on a boundary)."""
    if allowed <= 0:
        return math.inf
    return float(max(1, fig.MIN_ROUNDS - rounds, math.ceil(max(rounds, 1) * (width / allowed) ** 2) - rounds))


def more_rounds_for(figure) -> float:
    """more_rounds for a RoundsEstimate (None: no round yet) to leave out the nearest boundary it straddles"""
    if figure is None:
        return float(fig.MIN_ROUNDS)
    if not figure.straddles:
        return float(max(1, fig.MIN_ROUNDS - figure.rounds))
    distance = min(abs(figure.median - boundary) for boundary in figure.straddles)
    return more_rounds(figure.rounds, figure.high - figure.low, 2 * distance)


@dataclass(frozen=True)
class Resumable:
    """A stage that runs again: run(stage) -> its parts over all passes; more_rounds() -> inf when unknown."""

    run: Callable[[Stage], dict]
    more_rounds: Callable[[], float]


@dataclass(frozen=True)
class Event:
    """A progress report of kind 'plan', 'start', 'note', 'round' or 'end'; share_s None for the whole run."""

    stage: str
    kind: str
    message: str
    share_s: float | None
    spent_s: float
    left_s: float


Progress = Callable[[Event], None]


def no_progress(event: Event) -> None:
    """The progress callback that reports nothing."""


class Budget:
    """A run's clock and time left; each stage's share of what is left as it starts, in proportion to needs"""

    def __init__(self, total_s: float, needs: Mapping[str, float], clock: Callable[[], float]):
        self.total_s, self.clock, self.start = float(total_s), clock, clock()
        self.needs, self.pending = dict(needs), list(needs)

    def elapsed_s(self) -> float:
        return self.clock() - self.start

    def left_s(self) -> float:
        return self.total_s - self.elapsed_s()

    def plan(self, held: tuple[str, ...] = ()) -> dict[str, float]:
        """What is left split over the stages pending and `held` (ran undecided: kept for a second pass)."""
        return split_budget(self.left_s(), {name: self.needs[name] for name in (*self.pending, *held)})

    def take(self, name: str, *, held: tuple[str, ...] = ()) -> float:
        """name's share of plan(held); name is then no longer pending."""
        share = self.plan(held)[name]
        self.pending.remove(name)
        return share


class Stage:
    """A stage as it runs: its share, clock, progress and rounds; its function sets plan and status.
    reserve_s: kept from its rounds for what follows them (closing iterators: an earlier pass's tail_s())."""

    def __init__(self, name: str, share_s: float, budget: Budget, progress: Progress, reserve_s: float = 0.0):
        self.name, self.share_s, self.reserve_s = name, share_s, reserve_s
        self.plan, self.status, self.rounds = "", fig.DONE, 0
        self._budget, self._progress, self._start = budget, progress, budget.clock()
        self._in_rounds_s, self._rounds_need_s, self._rounds_end = 0.0, None, None
        self._running_rounds = 0  # rounds of an until_decided still going (an interrupt's record counts them)

    def spent_s(self) -> float:
        return self._budget.clock() - self._start

    def left_s(self) -> float:
        return self.share_s - self.reserve_s - self.spent_s()

    def tail_s(self) -> float:
        """Seconds since its last rounds ended (0 without rounds)."""
        return 0.0 if self._rounds_end is None else self._budget.clock() - self._rounds_end

    def tell(self, kind: str, message: str) -> None:
        self._progress(Event(self.name, kind, message, self.share_s, self.spent_s(), self._budget.left_s()))

    def planned(self, plan: str, status: str | None = None) -> None:
        """The stage's plan in words, kept and told; status, where given, set with it."""
        self.plan = plan
        self.tell("note", plan)
        if status is not None:
            self.status = status

    def rounds_until_decided(self, one_round: Callable[[int], None], *, decided: Callable[[], bool],
                             share_s: float | None = None, first_estimate_s: float | None = None,
                             warmup_rounds: int = 0, what: str = "") -> RoundsOutcome:
        """rounds.until_decided within share_s (default: what is left of the share), each round told."""
        def on_round(rounds, spent_s):
            self._running_rounds = rounds
            self.tell("round", f"{what}round {rounds} measured" if rounds else f"{what}warm-up round done")

        limit_s = self.left_s() if share_s is None else share_s
        outcome = until_decided(one_round, decided=decided, limit_s=limit_s, max_rounds=fig.MAX_ROUNDS,
                                min_rounds=fig.MIN_ROUNDS, clock=self._budget.clock, on_round=on_round,
                                first_estimate_s=first_estimate_s, warmup_rounds=warmup_rounds)
        self.rounds += outcome.rounds
        self._running_rounds = 0
        self._in_rounds_s += outcome.seconds
        self._rounds_end = self._budget.clock()
        if outcome.round_s is not None:
            need_s = (warmup_rounds + fig.MIN_ROUNDS) * outcome.round_s
            self._rounds_need_s = (self._rounds_need_s or 0.0) + need_s
        return outcome

    def record(self, status: str | None = None) -> fig.StageRecord:
        need_s = self._rounds_need_s
        needs = None if need_s is None else self.spent_s() - self._in_rounds_s + need_s
        return fig.StageRecord(name=self.name, share_s=self.share_s, spent_s=self.spent_s(),
                               rounds=self.rounds + self._running_rounds, status=status or self.status,
                               plan=self.plan, needs_s=needs)


def worst_status(statuses) -> str:
    """A stage's status from its parts' (TOO_SHORT before UNDECIDED before DECIDED)."""
    statuses = set(statuses)
    return next((status for status in (fig.TOO_SHORT, fig.UNDECIDED, fig.DECIDED) if status in statuses), fig.DONE)


class StageLog:
    """A diagnosis as measured: its parts and stage records, snapshot() checkpointed after each stage."""

    def __init__(self, *, make: Callable[..., Any], parts: dict[str, Any], budget: Budget, progress: Progress,
                 checkpoint: Callable[[Any], None] | None):
        self.make, self.parts, self.budget, self.progress = make, dict(parts), budget, progress
        self.checkpoint = checkpoint
        self.stages: list[fig.StageRecord] = []
        self.tails: dict[str, float] = {}  # per stage, its passes' longest tail_s(): a later pass's reserve

    def snapshot(self, *, complete: bool):
        return self.make(complete=complete, elapsed_s=self.budget.elapsed_s(), stages=tuple(self.stages),
                         **self.parts)

    def save(self, *, complete: bool = False) -> None:
        if self.checkpoint is not None:
            self.checkpoint(self.snapshot(complete=complete))

    def tell_plan(self, *, after: str = "checking the data") -> None:
        budget = self.budget
        split = ", ".join(f"{name.replace('_', '-')} {share:.0f} s" for name, share in budget.plan().items())
        message = (f"budget {budget.total_s:.0f} s, {budget.left_s():.0f} s left after {after}: {split} "
                   "(a stage that decides early leaves its time to the next)")
        self.progress(Event("plan", "plan", message, None, 0.0, budget.left_s()))

    def stage(self, name: str, *, held: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[Stage]:
        """The stage `name` with its share of what is left (the stages `held` keep their part of it)."""
        stage = Stage(name, self.budget.take(name, held=held), self.budget, self.progress)
        return self._running(stage, f"share {stage.share_s:.0f} s", index=len(self.stages))

    def undecided(self) -> list[str]:
        """The stages that ended TOO_SHORT or UNDECIDED, in the order they ran."""
        return [record.name for record in self.stages if record.status in (fig.TOO_SHORT, fig.UNDECIDED)]

    def again(self, name: str, *, share_s: float | None = None) -> contextlib.AbstractContextManager[Stage]:
        """The undecided stage `name` once more, with share_s (default: all the budget left)."""
        stage = Stage(name, self.budget.left_s() if share_s is None else share_s, self.budget, self.progress,
                      reserve_s=self.tails.get(name, 0.0))
        index = next(i for i, record in enumerate(self.stages) if record.name == name)
        kept = (f", {stage.reserve_s:.0f} s of it kept for what followed its rounds last time"
                if stage.reserve_s >= 1 else "")
        start = f"again, with {stage.share_s:.0f} s of the time the other stages left{kept}"
        return self._running(stage, start, index=index, first=self.stages[index])

    @contextlib.contextmanager
    def _running(self, stage: Stage, start: str, *, index: int, first: fig.StageRecord | None = None
                 ) -> Iterator[Stage]:
        """stage as it runs, its record kept at index and checkpointed as it ends or is interrupted (then
        INTERRUPTED, raised on). After a first pass, one record of both: shares, seconds and rounds added, the
        second's status, needs_s the second's (it knows the longest round) after the first's seconds."""
        def keep(status: str | None = None) -> fig.StageRecord:
            self.tails[stage.name] = max(self.tails.get(stage.name, 0.0), stage.tail_s())
            record = stage.record(status)
            if first is not None:
                plan = f"{first.plan}; then again: {record.plan}" if record.plan else first.plan
                record = replace(record, share_s=first.share_s + record.share_s, plan=plan,
                                 spent_s=first.spent_s + record.spent_s, rounds=first.rounds + record.rounds,
                                 needs_s=None if record.needs_s is None else first.spent_s + record.needs_s)
            self.stages[index:index + 1] = [record]
            self.save()
            return record

        stage.tell("start", start)
        try:
            yield stage
        except KeyboardInterrupt:
            keep(fig.INTERRUPTED)
            raise
        record = keep()
        stage.tell("end", f"{record.status}: {record.rounds} round(s) in {record.spent_s:.0f} s"
                   + ("" if first is None else ", both passes"))

    def resume(self, passes: Mapping[str, Resumable]) -> None:
        """The budget left spent on the undecided stages among `passes`, nearest to deciding first, each given
        what is left less what those after it need; one with no estimate gets a fair part at least (no round
        yet: first; on a boundary: last). One still undecided records what it needs (needs_s)."""
        pending = [name for name in self.undecided() if name in passes]
        while pending and self.budget.left_s() > 0:
            needs = {name: self._seconds_to_decide(self._record(name), passes[name]) for name in pending}
            pending.sort(key=lambda name: needs[name])
            name, pending = pending[0], pending[1:]
            left = self.budget.left_s()
            fair = left / (1 + len(pending))
            if math.isinf(needs[name]):  # on a boundary: what is left, shared with the other such stages
                share = fair
            else:
                after = sum(needs[n] for n in pending if math.isfinite(needs[n]))
                share = max(min(needs[name], left), left - after)
                share = share if self._record(name).rounds else max(share, fair)  # no round: no estimate
            with self.again(name, share_s=share) as stage:
                self.parts.update(passes[name].run(stage))
        for index, record in enumerate(self.stages):
            if record.name in passes and record.status == fig.UNDECIDED:
                more = self._seconds_to_decide(record, passes[record.name])
                if math.isfinite(more):
                    self.stages[index] = replace(record, needs_s=record.spent_s + more)

    def _record(self, name: str) -> fig.StageRecord:
        return next(record for record in self.stages if record.name == name)

    @staticmethod
    def _seconds_to_decide(record: fig.StageRecord, resumable: Resumable) -> float:
        """Seconds of the rounds it needs more at its rounds' pace so far (inf: no estimate; 0: no round)."""
        if not record.rounds:
            return 0.0
        more = resumable.more_rounds()
        return more * record.spent_s / record.rounds if math.isfinite(more) else math.inf
