"""The ``perfsuite`` fixture's object: what a benchmark measures with, and what it records.

Every ``measure_*`` method keeps warm-up, trace and compile apart from the steady state, forces
completion with a readback, and spends the run profile's time budget on rounds (at least
``min_rounds``). Figures go to pytest-benchmark's ``extra_info`` (so into ``--benchmark-json`` and
``--benchmark-autosave`` files); gated metrics (names declared in ``perfsuite.verdict.metrics``) are
judged when the test body has run, each with its per-round values where it has rounds.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from perfsuite._tensorflow import is_dataset
from perfsuite.measure import stats, timing, work
from perfsuite.measure.input_bound import InputBound, InputBoundRounds
from perfsuite.measure.rounds import (
    InterleavedRounds,
    RoundDriver,
    RoundsOutcome,
    interleaved,
    planned,
    until_decided,
)
from perfsuite.measure.speech import FrameCounter, speech_figures
from perfsuite.measure.step_model import measure_step
from perfsuite.measure.teardown import iterate
from perfsuite.pytest_plugin import benchmark_adapter
from perfsuite.pytest_plugin.profiles import RunProfile
from perfsuite.pytest_plugin.report import BenchmarkRecord, GateMark, TimelineFigures
from perfsuite.pytest_plugin.summary import headline_figures
from perfsuite.verdict import metrics as metric_registry
from perfsuite.verdict.baselines import Baselines, record_measurements
from perfsuite.verdict.comparison import HistoryComparison, compare_history
from perfsuite.verdict.gates import CheckResult

T = TypeVar("T")

UNDECIDED_BUDGET_FACTOR = 2.0  # undecided gates may spend up to this many times the measurement's budget


def benchmark_id(profile_name: str, nodeid: str) -> str:
    """How thresholds and histories name a benchmark: its profile (figures depend on the corpus and
    budget) and its node id below benchmarks/."""
    return f"{profile_name}::{nodeid.split('benchmarks/', 1)[-1]}"


@dataclass(frozen=True)
class SessionContext:
    """What every benchmark of a session shares: the profile, the baselines and the comparison settings."""

    profile: RunProfile
    baselines_dir: Path
    baselines: Baselines
    gates: str  # "enforce" or "report"
    save_baselines: bool
    margin: float
    baseline_profile: str
    history: dict[str, list[float]]  # per benchmark id: earlier runs' figures on this hardware, oldest first
    compare_alpha: float
    compare_min_effect: float
    compare_mode: str  # "fail" or "report"
    # The rounds driven from outside (measure.rounds.RoundDriver; the hook pytest_perfsuite_round_driver
    # gives it: perfsuite ab's worker's, which runs the rounds of measure_dataset / measure_step and of
    # compare when its controller says); None: the run profile's budget decides, as always.
    round_driver: RoundDriver | None = None


@dataclass
class Outcome:
    """The verdicts of one benchmark, for the summary table and the pass/fail decision. The comparison
    with earlier runs is decided for all benchmarks together (Holm) at the end of the session."""

    benchmark_id: str
    check: CheckResult
    comparison: HistoryComparison | None
    gates: str
    notes: list[str] = field(default_factory=list)
    figures: tuple = ()  # summary.Figure: its headline figures, in the registry's order

    def failure_messages(self) -> list[str]:
        return [verdict.message for verdict in self.check.failures]

    def raise_for_failures(self) -> None:
        messages = self.failure_messages()
        if messages and self.gates == "enforce":
            raise AssertionError(f"{self.benchmark_id}: performance gate(s) failed:\n  " + "\n  ".join(messages))


class DatasetRounds:
    """One side of compare_datasets: each call is a round (a Measurement); ``continuing``: every round
    draws from one iterator (``continues`` says so to perfsuite ab), else each from a fresh one.
    ``dataset`` may be a zero-argument callable that builds it, called at the first round."""

    def __init__(self, dataset: Iterable | Callable[[], Iterable], profile: RunProfile, *, continuing: bool):
        self._dataset, self.profile, self.continues = dataset, profile, continuing
        self.iterator = None
        self.batch_s: list[float] = []  # each round's median batch time

    @property
    def dataset(self) -> Iterable:
        if callable(self._dataset):
            self._dataset = self._dataset()
        return self._dataset

    def __call__(self) -> timing.Measurement:
        if not self.continues:
            return self._round(self.dataset, warmup_batches=self.profile.warmup_batches)
        first = self.iterator is None
        if first:
            self.iterator = iterate(self.dataset)
        return self._round(self.iterator, warmup_batches=self.profile.warmup_batches if first else 1)

    def _round(self, source: Iterable, *, warmup_batches: int) -> timing.Measurement:
        result = timing.measure_dataset(dataset=source, warmup_batches=warmup_batches,
                                        measure_batches=self.profile.measure_batches,
                                        min_seconds=self.profile.min_round_s)
        self.batch_s.append(result.summary.median)
        return result


def _peeked(iterator: Iterator) -> tuple[Iterator, Any]:
    """The iterator as it was (its first item put back) and its first item."""
    first = next(iterator)
    return itertools.chain([first], iterator), first


class AloneRounds:
    """The rounds of a benchmark run alone, as many as the run profile's budget allows: the Recorder's
    round driver (a measure.rounds.RoundDriver) unless the hook gives it one (DrivenRounds). What differs
    between the two is said here and in DrivenRounds, once."""

    extras = True  # figures beside the rounds are taken: the harness overhead, the work fingerprint
    step_round_warmup_calls = 0  # a step's rounds follow each other with nothing in between
    continues_named_sides = False  # compare_datasets' sides interleave in one process: a fresh iterator a round

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def rounds(self, one_round: Callable[[], T], *, side: str | None = None, round_s: float | None = None) -> list[T]:
        """A calibration round (discarded) sizes the budget, unless the caller knows a round's length
        (``round_s``), then that many rounds (Recorder.planned_rounds, through pytest-benchmark)."""
        if round_s is None:
            start = time.perf_counter()
            one_round()
            round_s = time.perf_counter() - start
        return self.recorder.planned_rounds(lambda index: one_round(), self.recorder.profile.rounds_for(round_s))

    def pairs(self, a: Callable[[], Any], b: Callable[[], Any], *, name: str, sides: tuple[str, str] | None = None,
              warmup_rounds: int = 1) -> timing.ABResult:
        """compare's rounds of a and b (A B, B A, ...): ``warmup_rounds``, then one measured pair that sizes
        the budget's rounds, then pairs added while the gate on ``name`` is undecided (Recorder.more_rounds)."""
        recorder, start = self.recorder, time.perf_counter()
        engine = InterleavedRounds(timing.ab_runs(a, b), warmup_rounds=warmup_rounds)
        engine.run(warmup_rounds + 1)
        pair_s = (time.perf_counter() - start) / (1 + warmup_rounds)
        engine.run(recorder.profile.rounds_for(pair_s / 2) - 1)

        def undecided() -> bool:
            so_far = timing.ab_result(engine.values, engine.orders)
            return recorder.gate_undecided(name, so_far.summary.median, so_far.ratios)

        # Pairs of rounds while the gate is undecided, within UNDECIDED_BUDGET_FACTOR x the budget after these.
        spent_s = time.perf_counter() - start
        recorder.more_rounds(name, engine.one_round, undecided=undecided, rounds=len(engine.orders), spent_s=spent_s,
                             step=2, limit_s=spent_s + UNDECIDED_BUDGET_FACTOR * recorder.profile.budget_s)
        return timing.ab_result(engine.values, engine.orders)

    def more_rounds(self, name: str, one_round: Callable[[], Any], *, undecided: Callable[[], bool], rounds: int,
                    spent_s: float, step: int, label: Callable[[], str] | None,
                    limit_s: float | None) -> RoundsOutcome:
        """Recorder.more_rounds: rounds added through measure.rounds.until_decided, the outcome recorded."""
        recorder, profile = self.recorder, self.recorder.profile
        outcome = until_decided(lambda index: one_round(), decided=lambda: not undecided(), planned=rounds,
                                planned_s=spent_s, max_rounds=profile.max_rounds, step=step,
                                limit_s=UNDECIDED_BUDGET_FACTOR * max(profile.budget_s, spent_s)
                                if limit_s is None else limit_s, clock=time.perf_counter)
        recorder.benchmark.extra_info[f"{name}_rounds_outcome"] = outcome.as_dict()
        if outcome.note is not None:
            recorder.notes.append(f"{label() if label is not None else name}: {outcome.note}")
        return outcome


class DrivenRounds:
    """The rounds of a benchmark under ``perfsuite ab``: those the RoundDriver the hook gave (its worker's)
    asks for, its controller deciding when to stop and comparing the two revisions itself."""

    extras = False  # only the rounds count there (ab diffs the revisions' work fingerprints itself)
    step_round_warmup_calls = 1  # the other side runs between two rounds, so each warms up again
    continues_named_sides = True  # a named side is measured alone: its rounds continue one iterator

    def __init__(self, driver: RoundDriver):
        self.driver = driver

    def rounds(self, one_round: Callable[[], T], *, side: str | None = None, round_s: float | None = None) -> list[T]:
        """One round discarded (the calibration round of a benchmark alone), then the driver's; ``side``
        names what they measure, as Recorder.measure_dataset says."""
        one_round()
        if side is None:  # a driver older than measured sides takes no such argument
            return self.driver.rounds(one_round)
        return self.driver.rounds(one_round, side=side)

    def pairs(self, a: Callable[[], Any], b: Callable[[], Any], *, name: str, sides: tuple[str, str] | None = None,
              warmup_rounds: int = 1) -> timing.ABResult:
        if sides is None:  # a driver older than named sides takes no such argument
            return self.driver.pairs(a, b, name=name)
        return self.driver.pairs(a, b, name=name, sides=tuple(sides))

    def more_rounds(self, name: str, one_round: Callable[[], Any], **_) -> None:
        """None are added: a measurement that adds rounds is not compared under perfsuite ab."""
        return None


class Recorder:
    """What a benchmark measures with (the ``perfsuite`` fixture); see the module docstring."""

    def __init__(self, *, benchmark, context: SessionContext, nodeid: str):
        self.benchmark = benchmark
        self.context = context
        self.profile: RunProfile = context.profile
        self.nodeid = nodeid
        self.benchmark_id = benchmark_id(context.profile.name, nodeid)
        self.metrics: dict[str, float] = {}
        self.rounds: dict[str, tuple[float, ...]] = {}  # per-round values of a metric, where it has rounds
        self.primary: timing.Measurement | None = None
        self.primary_unit = "batch"  # what one of the primary measurement's times is: a batch or a step call
        self.primary_round_lengths: list[int] | None = None
        self.notes: list[str] = []  # for the summary, e.g. a gate whose rounds ran out undecided
        self.work = None  # the work fingerprint of what measure_dataset / measure_step measured last
        # Who decides the rounds, decided once: the run profile's budget, or perfsuite ab's controller.
        self.driver = AloneRounds(self) if context.round_driver is None else DrivenRounds(context.round_driver)
        self._benchmark_used = False

    # -------------------------------------------------------------------------------- measuring

    def measure_dataset(self, dataset, *, name: str, samples_in: Callable[[Any], int] | None = None,
                        readback: Callable[[Any], Any] | None = None, frame_s: float | None = None,
                        before_round: Callable[[], Any] | None = None, side: str | None = None
                        ) -> timing.Measurement:
        """Steady-state throughput of a dataset (repeated as needed): warm-up batches apart, then rounds of
        at least ``measure_batches`` batches and ``min_round_s`` seconds, as many as the budget allows.

        Records samples/s (and its per-round values), per-batch times, variation and cycles.
        ``samples_in(batch)`` counts a batch's samples (default: its leading dimension);
        ``readback(batch)`` forces completion (default: reads every tensor back to the host).
        ``frame_s``: seconds of audio per mel frame (hop / sample rate): with it, batches holding ``mel``
        and ``mel_len`` also give audio-seconds/s and padding efficiency. ``before_round()`` runs before
        every round, untimed (e.g. evicting the files from the page cache for cold reads). ``side``
        names what it measures as a ``compare`` side of that name would: under ``perfsuite ab`` a later
        compare naming that side in the same process takes these rounds instead of measuring it again.
        """
        iterator = iterate(dataset.repeat() if hasattr(dataset, "repeat") else dataset)
        counter = FrameCounter() if frame_s is not None and samples_in is None else None
        options = {k: v for k, v in {"samples_in": samples_in or counter, "readback": readback}.items()
                   if v is not None}
        warm = timing.measure_dataset(dataset=iterator, warmup_batches=self.profile.warmup_batches,
                                      measure_batches=1, name=name, **options)
        frames = []  # per round: (real, padded) frames of its steady batches

        def one_round():
            if before_round is not None:
                before_round()
            noted = len(counter.real) if counter is not None else 0
            result = timing.measure_dataset(dataset=iterator, warmup_batches=1, name=name, **options,
                                            measure_batches=self.profile.measure_batches,
                                            min_seconds=self.profile.min_round_s)
            if counter is not None:  # the round's first batch is its warm-up
                frames.append((sum(counter.real[noted + 1:]), sum(counter.padded[noted + 1:])))
            return result

        rounds = self.driver.rounds(one_round, side=side)
        measurement = self._record_rounds(rounds, name=name, first=warm, unit="batch")
        if counter is not None and frames and frames[-1][1] > 0:
            self._record_speech(rounds, frames[-len(rounds):], frame_s)
        # What of each batch time is the timing loop's own (not under perfsuite ab: only rounds count there).
        if is_dataset(dataset) and self.driver.extras:
            overhead = timing.harness_overhead(dataset, samples_in=samples_in, readback=readback)
            self.record({"harness_overhead_s": overhead,
                         "harness_share": overhead / measurement.summary.median})
        if is_dataset(dataset):
            audio = work.mel_seconds(frame_s) if frame_s is not None else None
            self._record_work(lambda: work.dataset_work(dataset, name=name, audio_seconds=audio), name)
        return measurement

    def _record_speech(self, rounds, frames, frame_s: float) -> None:
        per_round = [speech_figures(real_frames=real, padded_frames=padded, frame_s=frame_s,
                                    seconds=sum(r.batch_ns) / 1e9) for r, (real, padded) in zip(rounds, frames)]
        audio = [f.audio_s_per_s for f in per_round]
        self.add("audio_s_per_s", statistics.median(audio), rounds=audio)
        self.record({"padding_efficiency": sum(r for r, _ in frames) / sum(p for _, p in frames)})

    def measure_step(self, step: Callable[[Any], Any], *, batches: Iterable, name: str,
                     readback: Callable[[Any], Any] | None = None) -> timing.Measurement:
        """Steady-state speed of a training step fed from ``batches``: its first call (trace + compile)
        apart as ``first_s``, then rounds within the budget, of as many calls as the warm-up's last call
        says fill the profile's round (``calls_per_round``). ``readback(output)`` forces completion
        (default: one element of the step's output back to the host).

        Run alone, the rounds follow each other with nothing in between: the warm-up's last call sizes
        them and they take no warm-up call of their own (a step call costs up to seconds on a CPU).
        Under ``perfsuite ab`` the other side runs between two rounds, so each round warms up again."""
        source, first_batch = _peeked(iterate(batches))
        options = {"readback": readback} if readback is not None else {}
        warm = measure_step(step=step, batches=source, warmup_calls=self.profile.step_warmup_calls,
                            measure_calls=1, name=name, **options)
        calls = self.profile.calls_per_round(warm.steady_s)

        def one_round():
            return measure_step(step=step, batches=source, warmup_calls=self.driver.step_round_warmup_calls,
                                name=name, measure_calls=calls, **options)

        rounds = self.driver.rounds(one_round, round_s=warm.steady_s * calls)
        measurement = self._record_rounds(rounds, name=name, first=warm, unit="call")
        self._record_work(lambda: work.step_work(step, first_batch, name=name), name)
        return measurement

    def _record_work(self, fingerprint: Callable[[], work.WorkFingerprint], name: str) -> None:
        """The work fingerprint of what was measured (perfsuite.measure.work), taken after the rounds, into
        ``self.work`` and extra_info (``work_*``); one that cannot be read is noted in the summary. Not
        under perfsuite ab, which diffs the two revisions' fingerprints itself."""
        if not self.driver.extras:
            return
        try:
            self.work = fingerprint()
        except work.WorkUnavailable as error:
            self.notes.append(f"{name}: no work fingerprint: {error}")
            self.benchmark.extra_info["work_unavailable"] = str(error)
            return
        self.record(self.work.extra_info())

    def measure_input_bound(self, *, step: Callable[[Any], Any], dataset, warmup: int = 2,
                            settle: int | None = None, batches: int | None = None, rounds: int | None = None,
                            metric: str = "input_bound") -> InputBound:
        """The step fed by ``dataset`` (a repeated tf.data.Dataset) and by its synthetic twin (one cached
        batch), in alternating rounds (perfsuite.measure.input_bound); records the input-bound share
        ``metric`` and the wait share (``metric`` named ``..._input_wait`` instead of ``..._input_bound``)
        with their per-round values. Defaults: a side's timed steps sized like a step round (at least
        ``step_calls``, more until they last ``min_round_s``), ``min_rounds`` rounds, then more while a gate
        on either is inconclusive (``more_rounds``). A given ``batches`` or ``rounds`` fixes the count
        instead. ``warmup`` and ``settle``: untimed steps per side in the first round and in each later one
        (``settle`` defaults to ``warmup``)."""
        wait_metric = metric_registry.wait_metric_of(metric)
        measurement = InputBoundRounds(step=step, dataset=dataset, warmup=warmup, settle=settle,
                                       batches=batches or self.profile.step_calls,
                                       round_s=0.0 if batches else self.profile.min_round_s)

        def undecided() -> list[str]:  # the metrics whose counting gates are inconclusive so far
            so_far = measurement.result()
            figures = {metric: (so_far.share, so_far.shares), wait_metric: (so_far.wait_share, so_far.wait_shares)}
            return [name for name, (value, per_round) in figures.items() if self.gate_undecided(name, value, per_round)]

        def measure():
            started = time.perf_counter()
            planned(lambda index: measurement.one_round(), rounds or self.profile.min_rounds)
            if rounds is None:
                self.more_rounds(metric, measurement.one_round, undecided=lambda: bool(undecided()),
                                 rounds=self.profile.min_rounds, spent_s=time.perf_counter() - started,
                                 label=lambda: " and ".join(undecided()) or metric)
            return measurement.result()

        result = self._once(measure)
        benchmark_adapter.time_per_unit(self.benchmark, result.real_round_s, unit="s/step fed by the pipeline")
        self.record(result, prefix="input_bound_")
        self.add(metric, result.share, rounds=result.shares)
        self.add(wait_metric, result.wait_share, rounds=result.wait_shares)
        return result

    def measure_epoch(self, *, step: Callable[[Any], Any], dataset, name: str) -> timing.Measurement:
        """One pass of a finite ``dataset`` through ``step`` (first call apart); traces counted over the
        whole epoch, so a step that retraces on new shapes shows it."""
        batches = int(dataset.cardinality())
        if batches < 2:
            raise ValueError(f"dataset: expected a known number of batches ≥ 2 for an epoch, found {batches}")
        result = self._once(lambda: measure_step(step=step, batches=iterate(dataset), warmup_calls=1,
                                                 measure_calls=batches - 1, name=name))
        self.primary_unit = "call"
        benchmark_adapter.time_per_unit(self.benchmark, [1 / result.batches_per_s], unit="s/step")
        return self.record(result)

    def compare(self, name: str, *, a: Callable[[], Any], b: Callable[[], Any], rounds: int | None = None,
                sides: tuple[str, str] | None = None, warm: bool = False) -> timing.ABResult:
        """Interleaved rounds of ``a`` and ``b`` (A B, B A, ...; each returns seconds for a fixed amount
        of work, or a Measurement), after one warm-up round (see ``warm``); records the median per-round
        ratio of A's speed over B's as ``name`` (a metric declared in the registry, e.g. ``*_ratio``), with
        every round's ratio. Rounds follow the budget; while the gate on ``name`` is inconclusive, pairs of
        rounds are added until it is decided, ``max_rounds`` is reached or twice the budget is spent.
        A given ``rounds`` fixes the count instead. ``sides`` names what a and b measure: compares that
        name a side alike measure the same thing, so ``perfsuite ab`` compares each named side once a
        pass and derives the ratio's change from its sides'. ``warm``: each side warms up within every
        round of its own (a step's warm-up call), so no warm-up round precedes them."""
        metric_registry.lookup(name)
        if sides is not None and (len(sides) != 2 or len(set(sides)) != 2 or not all(sides)):
            raise ValueError(f"sides: expected two different names (A's, B's), found {sides!r}")
        started, warmup_rounds = time.perf_counter(), 0 if warm else 1
        if rounds is not None:
            result = self._once(lambda: timing.ab_result(*interleaved(timing.ab_runs(a, b), rounds=rounds,
                                                                      warmup_rounds=warmup_rounds)))
        else:
            result = self._once(lambda: self.driver.pairs(a, b, name=name, sides=sides, warmup_rounds=warmup_rounds))
        self.add(name, result.summary.median, rounds=result.ratios,
                 extra={f"{name}_detail": result.as_dict(), f"{name}_seconds": time.perf_counter() - started})
        per_sample = result.unit == "samples/s"
        benchmark_adapter.time_per_unit(self.benchmark, [1 / v for v in result.a_values] if per_sample
                                        else result.a_values, unit="s/sample of A" if per_sample else "s/round of A")
        return result

    def compare_datasets(self, name: str, *, a: Iterable | Callable[[], Iterable],
                         b: Iterable | Callable[[], Iterable], sides: tuple[str, str] | None = None) -> timing.ABResult:
        """``compare`` of two repeated datasets' throughput (samples/s), each round at least
        ``measure_batches`` batches and ``min_round_s`` seconds after one warm-up batch. Interleaved in
        one process, every round draws from a fresh iterator, so neither side's buffers fill during the
        other's round. Under ``perfsuite ab`` a named side is measured alone (its rounds back to back,
        the process frozen between them), so its rounds continue one iterator, as measure_dataset's
        do: no pipeline start-up and teardown inside every round. A side given as a zero-argument
        callable is built at its first round: under ab a side measured earlier in the process is never
        built again. Records ``harness_share_a`` / ``_b``: how much of each side's batch time is the
        timing loop's own (it weighs most on the fast side)."""
        alone = self.driver.continues_named_sides and sides is not None
        rounds = [DatasetRounds(dataset, self.profile, continuing=alone) for dataset in (a, b)]
        result = self.compare(name, a=rounds[0], b=rounds[1], sides=sides)
        for key, side in zip("ab", rounds):
            if self.driver.extras and is_dataset(side.dataset):
                share = timing.harness_overhead(side.dataset) / statistics.median(side.batch_s)
                self.record({f"harness_share_{key}": share})
        return result

    # ------------------------------------------------------------------------------- rounds

    def planned_rounds(self, one_round: Callable[[int], Any], rounds: int) -> list:
        """``rounds`` rounds of ``one_round(index)`` (measure.rounds.planned; index 0 first), their results
        in order; pytest-benchmark times each where no earlier measurement of this benchmark used it (its
        table then shows each round's wall time)."""
        instrument = None
        if not self._benchmark_used:
            self._benchmark_used = True

            def instrument(target, count):
                benchmark_adapter.time_rounds(self.benchmark, target, rounds=count)

        return planned(one_round, rounds, instrument=instrument)

    def _once(self, work: Callable[[], Any]) -> Any:
        """Work timed as one pytest-benchmark round (its own figures are what count); returns its result."""
        if self._benchmark_used or not benchmark_adapter.enabled(self.benchmark):
            return work()
        self._benchmark_used = True
        return benchmark_adapter.time_rounds(self.benchmark, work, rounds=1)

    def gate_undecided(self, name: str, value: float, rounds: Sequence[float]) -> bool:
        """Whether a gate that counts (not a context one) on metric ``name`` is inconclusive on these rounds."""
        check = self.context.baselines.check(benchmark_id=self.benchmark_id, metrics={name: value},
                                             rounds={name: rounds})
        return bool(check.undecided)

    def more_rounds(self, name: str, one_round: Callable[[], Any], *, undecided: Callable[[], bool], rounds: int,
                    spent_s: float, step: int = 1, label: Callable[[], str] | None = None,
                    limit_s: float | None = None) -> RoundsOutcome | None:
        """Rounds added by ``one_round`` after ``rounds`` planned ones that took ``spent_s``, while
        ``undecided()``, within max_rounds and ``limit_s`` in all, by default UNDECIDED_BUDGET_FACTOR x
        max(budget, spent_s) (a measurement whose planned rounds alone outrun the budget may double
        them; compare's ratio gates: that many budgets after their planned rounds). ``name`` (a metric,
        or the measurement's) labels the outcome: extra_info gets ``<name>_rounds_outcome``, and the
        summary a note when the rounds ended with a gate undecided, named by ``label()`` if given (the
        metrics still undecided) else by ``name``.
        Under ``perfsuite ab`` (DrivenRounds) none are added: such a measurement is not compared there."""
        return self.driver.more_rounds(name, one_round, undecided=undecided, rounds=rounds, spent_s=spent_s,
                                       step=step, label=label, limit_s=limit_s)

    # -------------------------------------------------------------------------------- recording

    def _record_rounds(self, rounds: list[timing.Measurement], *, name: str, first: timing.Measurement,
                       unit: str) -> timing.Measurement:
        self.primary_unit, self.primary_round_lengths = unit, [len(r.batch_ns) for r in rounds]
        measurement = self.record(timing.combine(rounds, name=name, first=first))
        self._keep_rounds("samples_per_s", [r.samples_per_s for r in rounds])
        per_sample = unit == "batch"  # a step's unit is the call: pytest-benchmark's ops are then steps/s
        benchmark_adapter.time_per_unit(self.benchmark, [1 / (r.samples_per_s if per_sample else r.batches_per_s)
                                                         for r in rounds], unit="s/sample" if per_sample else "s/step")
        self.benchmark.extra_info["rounds"] = len(rounds)
        return measurement

    def record(self, figures, *, prefix: str = ""):
        """Attach figures (a Measurement, InputBound, GpuStats or dict) to extra_info.

        Without a prefix a Measurement is the benchmark's primary measurement: its declared metrics
        (samples/s, variation, traces ...) are judged and compared with earlier runs.
        """
        if hasattr(figures, "extra_info"):  # a record with flat figures for extra_info (Measurement, GpuStats)
            as_dict = figures.extra_info()
        else:
            as_dict = figures.as_dict() if hasattr(figures, "as_dict") else dict(figures)
        for key, value in as_dict.items():
            self.benchmark.extra_info[f"{prefix}{key}"] = value
        if isinstance(figures, timing.Measurement) and not prefix:
            self.primary = figures
            for key, value in as_dict.items():
                if value is not None and metric_registry.is_declared(key) and isinstance(value, int | float):
                    self.metrics[key] = value
        return figures

    def add(self, name: str, value: float, *, rounds: Sequence[float] | None = None,
            extra: dict | None = None) -> None:
        """A gated metric (declared in perfsuite.verdict.metrics), optionally with its per-round values,
        which its gates are decided from."""
        metric_registry.lookup(name)
        self.metrics[name] = value
        self.benchmark.extra_info[name] = value
        if rounds is not None:
            self._keep_rounds(name, rounds)
        for key, item in (extra or {}).items():
            self.benchmark.extra_info[key] = item

    def _keep_rounds(self, name: str, values: Sequence[float]) -> None:
        """A metric's per-round values, kept for its gates and written as the registry's naming rule says:
        ``<name>_rounds`` and ``<name>_interval`` (of their median)."""
        self.rounds[name] = tuple(float(v) for v in values)
        self.benchmark.extra_info[f"{name}_rounds"] = list(self.rounds[name])
        if self.rounds[name]:
            interval = stats.median_interval(self.rounds[name])
            self.benchmark.extra_info[f"{name}_interval"] = [interval.low, interval.high]

    def report_record(self, check: CheckResult | None = None) -> dict:
        """What --perfsuite-report shows of this benchmark: a report.BenchmarkRecord, as its as_dict()
        (JSON-ready: it may travel from an xdist worker); ``check``: its verdicts, whose thresholds the
        ratio plot draws."""
        gates = tuple(GateMark(metric=v.metric, kind=v.kind, threshold=v.threshold,
                               decision=v.decision) for v in (check.verdicts if check is not None else ()))
        lengths = self.primary_round_lengths
        return BenchmarkRecord(
            benchmark_id=self.benchmark_id, nodeid=self.nodeid, gates=gates,
            metrics={k: None if v is None else float(v) for k, v in self.metrics.items()
                     if v is None or isinstance(v, int | float)},
            measurement=None if self.primary is None else TimelineFigures.of(self.primary),
            unit=self.primary_unit, round_lengths=None if lengths is None else tuple(lengths),
            ratio_rounds={k: tuple(v) for k, v in self.rounds.items() if metric_registry.lookup(k).same_run},
        ).as_dict()

    # -------------------------------------------------------------------------------- judging

    def judge(self) -> Outcome:
        """Verdicts against the gates and the matched profile, and the comparison with earlier runs."""
        context = self.context
        check = context.baselines.check(benchmark_id=self.benchmark_id, metrics=self.metrics, rounds=self.rounds)
        self.benchmark.extra_info["perfsuite_profile"] = self.profile.name
        self.benchmark.extra_info["perfsuite_verdicts"] = check.as_dict()
        outcome = Outcome(self.benchmark_id, check, self._compare(), context.gates,
                          notes=list(check.notes) + self.notes, figures=headline_figures(self.metrics, self.rounds))
        if context.save_baselines:
            path = self._save()
            if path is not None:
                outcome.notes.append(f"recorded into {path}")
        return outcome

    def _compare(self) -> HistoryComparison | None:
        history = self.context.history.get(self.benchmark_id)
        current = self.metrics.get("samples_per_s")
        if history is None or current is None:
            return None
        comparison = compare_history(history, current, higher_is_better=True,
                                     min_effect=self.context.compare_min_effect, alpha=self.context.compare_alpha)
        self.benchmark.extra_info["vs_history"] = comparison.as_dict()
        return comparison

    def _save(self) -> Path | None:
        recordable = metric_registry.recordable(self.metrics)
        recorded = {k: v for k, v in self.metrics.items() if k in recordable and math.isfinite(v)}
        if not recorded:
            return None
        path = self.context.baselines_dir / f"{self.context.baseline_profile}.yaml"
        record_measurements(path, profile_name=self.context.baseline_profile,
                            fingerprint=self.context.baselines.fingerprint, benchmark_id=self.benchmark_id,
                            metrics=recorded, margin=self.context.margin)
        return path
