"""`perfsuite diagnose`: measure a user's LJSpeech-layout dataset end to end within a time budget, and say
what holds its training input back and how sure that is.

diagnose() runs check-data, then measures the readable files in stages: loaders, training step,
input-bound share, a workers / batch-size sweep and, on request, a profiler trace. The budget
(settings.budget_s) is split across the stages by what each needs (split_budget); a stage measures in
rounds until its figures are decided or its share is spent (run_stage_rounds), and what a stage leaves
goes to the stages after it. Every figure is a RoundsEstimate: the median of per-round values, its
interval and the rounds behind it. A verdict whose interval straddles a class boundary says so, and
one resting on fewer than MIN_ROUNDS rounds says "not enough time to decide" instead of guessing.
After each stage the Diagnosis so far goes to checkpoint() (the CLI writes it as JSON), so an
interrupted run keeps what it measured, marked complete=False. Diagnosis.as_dict() is the --json file
(schema version SCHEMA_VERSION); Diagnosis.from_dict() reads one back. docs/diagnose.md gives the
reasons behind each choice and threshold.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from perfsuite.measure.emulated import (  # no TensorFlow
    DEFAULT_MEL,
    DEFAULT_STEP_PRESET,
    MIN_INTERVAL_S,
    EmulatedRunConfig,
    FeedRateConfig,
    emulated_figures,
    emulated_stats,
    feed_rate,
    parse_step_time,
    run_emulated,
)
from perfsuite.records import Record, RecordError, migrate, migration

SCHEMA_VERSION = 5
SOURCES = ("wav", "cache")
STEP_MODES = ("eager", "graph", "xla")
STEP_RATIOS = {"graph_over_eager": ("graph", "eager"), "xla_over_graph": ("xla", "graph")}
SWEEP_AXES = ("workers", "batch_size")

# Thresholds of the verdicts (docs/diagnose.md says why these values).
MATERIAL_SPEEDUP = 1.2  # loaders, cache vs WAV: a smaller ratio is treated as noise
MATERIAL_STEP_SPEEDUP = 1.1  # step modes differ by less, and their same-round ratios are steadier
UNSTABLE_VARIATION = 0.10  # per-batch stdev >= 10 % of the mean (pyperf's rule)
SWEEP_MIN_GAIN = 0.10  # a sweep point must be faster by a median >= 10 % ...
SWEEP_MIN_WIN_SHARE = 0.8  # ... in >= 80 % of the rounds ...
SWEEP_ALPHA = 0.05  # ... with a one-sided paired t-test p < 0.05 (stats.paired_gain)
GPU_IDLE_MEDIAN_PCT = 50.0

# Class boundaries: a figure is decided when its interval holds none of its verdict's boundaries.
LOADER_BOUNDARIES = (1 / MATERIAL_SPEEDUP, MATERIAL_SPEEDUP)
CACHE_BOUNDARIES = (MATERIAL_SPEEDUP,)  # the cache is recommended when >= 1.2x faster; below, no change
STEP_BOUNDARIES = (1 / MATERIAL_STEP_SPEEDUP, MATERIAL_STEP_SPEEDUP)
INPUT_BOUND_BOUNDARIES = (0.05, 0.20)  # stats.MODERATELY_INPUT_BOUND, stats.HIGHLY_INPUT_BOUND (TF's profiler)
VARIATION_BOUNDARIES = (UNSTABLE_VARIATION,)
SWEEP_BOUNDARIES = (1 + SWEEP_MIN_GAIN,)

# The budget (docs/diagnose.md, "The time budget").
DEFAULT_BUDGET_S = 180.0  # a default run answers in about three minutes: the budget is wall time, not work
MIN_ROUNDS = 3  # fewer rounds: "not enough time to decide"; the range of 3 rounds covers the median at 75 %
TARGET_ROUNDS = 6  # rounds are sized so that this many fit a share: the range of 6 covers the median at 97 %
MAX_ROUNDS = 30  # a stage whose figure sits on a boundary stops here even with time left
MIN_STEP_BATCHES = 3  # timed steps per side of an input-bound round, at least ...
MAX_STEP_CALLS = 64  # ... and step calls per side or mode of a round, at most (a fast step gets longer rounds)
STAGES = ("loaders", "step", "input_bound", "feed", "sweep", "trace")
STAGE_NEEDS = {"loaders": 2.0, "step": 4.0, "input_bound": 9.0, "feed": 3.0, "sweep": 3.0, "trace": 1.0}
FEED_SEARCH_SHARE = 0.6  # of a pipeline's share of the feed stage: the search; the rest, a round at the step
FEED_ROUND_SAMPLES = 32  # utilisation samples of that round: the cycle detector's minimum

# A stage's status.
DECIDED = "decided"
UNDECIDED = "undecided"  # share spent with >= MIN_ROUNDS rounds; an interval still straddles a boundary
TOO_SHORT = "not enough time to decide"
INTERRUPTED = "interrupted"
DONE = "done"  # a stage with nothing to decide (the trace)

LOADER_STRENGTHS = {"tf_native": "graph ops: no GIL, no Python per sample"}


def without_kind(data: Any, kind: str, where: str) -> dict:
    """data (a JSON object, already migrated) less its 'kind' key, after checking that it names `kind`:
    the two diagnose JSON files (a dataset's, a --pipeline run's) say which they are."""
    if not isinstance(data, dict) or data.get("kind") != kind:
        found = repr(data.get("kind")) if isinstance(data, dict) else type(data).__name__
        raise RecordError(where, "kind", repr(kind), found)
    return {key: value for key, value in data.items() if key != "kind"}


# ------------------------------------------------------------------------------------ the records


@dataclass(frozen=True)
class RoundsEstimate(Record):
    """A figure measured over rounds: the median of its per-round values, the distribution-free interval
    of that median (stats.median_interval) with its coverage, and the rounds behind it. boundaries: the
    class boundaries of the verdict that reads it; straddles: those inside the interval. Decided: at
    least MIN_ROUNDS rounds and no boundary inside the interval."""

    median: float
    low: float
    high: float
    coverage: float
    rounds: int
    boundaries: tuple[float, ...]
    straddles: tuple[float, ...]

    @property
    def decided(self) -> bool:
        return self.rounds >= MIN_ROUNDS and not self.straddles


def estimate(values, boundaries: tuple[float, ...] = ()) -> RoundsEstimate:
    """The RoundsEstimate of per-round values (at least one) against a verdict's class boundaries. A boundary b
    is straddled when low < b <= high: values on both sides of it are inside the interval."""
    from perfsuite.measure.stats import median_interval

    interval = median_interval([float(v) for v in values])
    straddles = tuple(b for b in boundaries if interval.low < b <= interval.high)
    return RoundsEstimate(median=interval.median, low=interval.low, high=interval.high, coverage=interval.coverage,
                    rounds=interval.n, boundaries=tuple(boundaries), straddles=straddles)


def check_step_time(spec: str | None) -> None:
    """ValueError unless spec is None, a STEP_PRESETS name or seconds > 0."""
    if spec is not None:
        parse_step_time(spec)


@dataclass(frozen=True)
class DiagnoseSettings(Record):
    """What a diagnosis measures and how long it may take. budget_s: the whole run, check-data included.
    batches: steady batches per loader and sweep round (the rounds are joined for cycle detection, which
    needs >= 32 points). The sweep axes always include the current workers / batch_size."""

    batch_size: int = 16
    workers: int = 2  # -1: AUTOTUNE
    model: str = "default"
    budget_s: float = DEFAULT_BUDGET_S
    batches: int = 16
    warmup: int = 1
    sweep_workers: tuple[int, ...] = (1, 2, 4)
    sweep_batch_sizes: tuple[int, ...] = ()  # empty: half, the same and twice batch_size
    trace_steps: int = 3
    step_time: str = DEFAULT_STEP_PRESET  # the emulated GPU step: a measure.emulated.STEP_PRESETS name or seconds

    def __post_init__(self):
        for name in ("batch_size", "batches", "warmup", "trace_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, found {value!r}")
        if self.workers != -1 and self.workers < 1:
            raise ValueError(f"workers: expected an integer >= 1 or -1 (AUTOTUNE), found {self.workers!r}")
        if not (isinstance(self.budget_s, int | float) and self.budget_s > 0):
            raise ValueError(f"budget_s: expected a number of seconds > 0, found {self.budget_s!r}")
        check_step_time(self.step_time)
        object.__setattr__(self, "sweep_workers", tuple(self.sweep_workers))
        sizes = self.sweep_batch_sizes or {max(1, self.batch_size // 2), self.batch_size, self.batch_size * 2}
        object.__setattr__(self, "sweep_batch_sizes", tuple(sorted(sizes)))


@dataclass(frozen=True)
class Pipeline(Record):
    """A loader's identity: kind (perfsuite.data.loaders.KINDS) and source ('wav' or 'cache')."""

    kind: str
    source: str

    @property
    def label(self) -> str:
        """For people (verdict topics, tables); never parsed back."""
        return f"{self.kind}-{self.source}"


LOADER_PIPELINES = (Pipeline("tf_native", "wav"), Pipeline("numpy_function", "wav"),
                    Pipeline("tf_native", "cache"), Pipeline("numpy_function", "cache"))
# (a, b) compared by same-round ratios of samples/s: the loaders of each source, and cache vs WAV.
LOADER_PAIRS = ((LOADER_PIPELINES[0], LOADER_PIPELINES[1]), (LOADER_PIPELINES[2], LOADER_PIPELINES[3]),
                (LOADER_PIPELINES[2], LOADER_PIPELINES[0]))


@dataclass(frozen=True)
class Problem(Record):
    """A file check-data found unreadable (loaders.SkippedFile, which imports TensorFlow, as a record)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Repeat(Record):
    """How often each usable utterance is listed for the measurements (repeat_copies)."""

    copies: int
    utterances_measured: int
    round_samples: int  # samples one measurement round draws at the largest batch size measured


@dataclass(frozen=True)
class DataSummary(Record):
    """What check-data found: utterances checked, usable (measured) and skipped, and each problem."""

    checked: int
    usable: int
    skipped: int
    sources: tuple[str, ...]
    problems: tuple[Problem, ...]
    repeat: Repeat


@dataclass(frozen=True)
class CacheUse(Record):
    """The .npy cache measured: dir is None when it was built in a temporary directory (temporary)."""

    dir: str | None
    temporary: bool


@dataclass(frozen=True)
class StaticShapes(Record):
    """Every loader pads to these (the readable files' longest text and mel), so the step traces once."""

    max_text_len: int
    max_mel_frames: int


LOADER_KEYS = ("samples_per_s", "batches", "cycle_significant", "cycle_period")  # what the verdicts read
GAIN_KEYS = ("ratios", "ratio_median", "ratio_low", "ratio_high", "wins", "rounds", "p_value", "significant")


@dataclass(frozen=True)
class PipelineFigures(Record):
    """One loader measured alone. loader: its steady batches, rounds joined (timing.Measurement.as_dict():
    per-batch times, variation, cycle). samples_per_s, variation: over the rounds (per-round samples/s,
    per-round standard deviation / mean of the batch times)."""

    pipeline: Pipeline
    loader: dict
    samples_per_s: RoundsEstimate
    variation: RoundsEstimate

    def __post_init__(self):
        missing = [key for key in LOADER_KEYS if key not in self.loader]
        if missing:
            raise ValueError(f"loader: expected the keys {', '.join(LOADER_KEYS)}, found no {', '.join(missing)}")


@dataclass(frozen=True)
class LoaderComparison(Record):
    """Two loaders measured in the same interleaved rounds. ratios: a's samples/s over b's, per round;
    ratio: their RoundsEstimate against LOADER_BOUNDARIES (two kinds, one source) or CACHE_BOUNDARIES (one
    kind, cache over WAV)."""

    a: Pipeline
    b: Pipeline
    ratios: tuple[float, ...]
    ratio: RoundsEstimate


@dataclass(frozen=True)
class StepMode(Record):
    """One mode of the training step on a fixed batch. first_s: the first call (trace, compile);
    first_steady_s: the call after the warm-up, which sizes the rounds. call_s: every timed call of the
    rounds; step_s: per-round mean seconds per call (None when no round fit). traces / retraces: of a
    tf.function, in all / in the rounds (None in eager mode)."""

    first_s: float
    first_steady_s: float
    call_s: tuple[float, ...]
    step_s: RoundsEstimate | None
    traces: int | None
    retraces: int | None


@dataclass(frozen=True)
class StepRatio(Record):
    """One mode's speed over another's (seconds per call of the other over its own), per round, and
    their RoundsEstimate against STEP_BOUNDARIES."""

    rounds: tuple[float, ...]
    ratio: RoundsEstimate


@dataclass(frozen=True)
class StepFigures(Record):
    """The training step on one fixed batch in every STEP_MODES mode, in interleaved rounds of
    calls_per_round calls per mode. ratios: per STEP_RATIOS name (empty when no round fit).
    input_bound_mode: the faster compiled mode, used for the input-bound share and the trace."""

    modes: dict[str, StepMode]
    ratios: dict[str, StepRatio]
    calls_per_round: int
    input_bound_mode: str

    def __post_init__(self):
        if set(self.modes) != set(STEP_MODES):
            raise ValueError(f"modes: expected {', '.join(STEP_MODES)}, found {', '.join(self.modes) or 'none'}")

    @property
    def input_bound_call_s(self) -> float:
        """Seconds per call of the input-bound mode: its steady median, else its first steady call."""
        mode = self.modes[self.input_bound_mode]
        return mode.step_s.median if mode.step_s is not None else mode.first_steady_s


@dataclass(frozen=True)
class InputBoundFigures(Record):
    """The compiled step fed by one pipeline vs by the synthetic twin (one cached batch repeated), in
    the same rounds. share: per-round 1 - t_synthetic / t_real against INPUT_BOUND_BOUNDARIES;
    classification: of its median (TF's profiler classes). t_real, t_synthetic: medians of the
    per-round mean seconds per step. batches: timed steps per side and round, after warmup untimed.
    pipeline: which loader; None for a --pipeline run's own pipeline (pipeline_inspect)."""

    share: RoundsEstimate
    classification: str
    t_real: float
    t_synthetic: float
    real_round_s: tuple[float, ...]
    synthetic_round_s: tuple[float, ...]
    batches: int
    warmup: int
    pipeline: Pipeline | None = None


@dataclass(frozen=True)
class SweepPoint(Record):
    """tf_native WAV samples/s at one point of a sweep axis over the rounds: median, range, relative
    spread, per round, and interval (a RoundsEstimate). vs_current: stats.PairedGain.as_dict() against the
    current setting in the same rounds, and ratio its RoundsEstimate against SWEEP_BOUNDARIES (both None for
    the current point). batches: steady batches per round (None when not recorded)."""

    point: int
    current: bool
    batches: int | None
    samples_per_s: float
    samples_per_s_low: float
    samples_per_s_high: float
    samples_per_s_spread: float
    samples_per_s_rounds: tuple[float, ...]
    interval: RoundsEstimate
    vs_current: dict | None
    ratio: RoundsEstimate | None


@dataclass(frozen=True)
class SweepAxis(Record):
    """One sweep axis ('workers' or 'batch_size'): every point measured in the same interleaved rounds,
    the thresholds a recommendation needs, and the order the points ran in each round."""

    axis: str
    current: int
    rounds: int
    min_gain: float
    min_win_share: float
    alpha: float
    points: tuple[SweepPoint, ...]
    order: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class GpuFigures(Record):
    """GPU utilisation while the input-bound steps ran. stats: gpu.GpuStats.as_dict(), timeline:
    gpu.GpuTimeline.as_dict(); reason says why either is missing."""

    available: bool
    reason: str | None = None
    stats: dict | None = None
    timeline: dict | None = None


@dataclass(frozen=True)
class FeedFigures(Record):
    """One pipeline feeding an emulated accelerator (perfsuite.measure.emulated). feed: FeedRate.as_dict(),
    the shortest step the pipeline keeps >= 90 % busy with its interval. step_time: the step asked for (a
    preset or seconds); step_s: that step on this data (the median over a round's batches); keeps_busy:
    whether step_s is at or above the feed interval (True), below it (False), or inside it (None);
    round: EmulatedRun.as_dict() of one round at the step, stats its utilisation statistics
    (emulated_figures), timeline its GpuTimeline.as_dict(). reason: why the round at the step is missing
    (its fields are None then)."""

    pipeline: str
    feed: dict
    step_time: str | None
    step_s: float | None
    keeps_busy: bool | None
    round: dict | None
    stats: dict | None
    timeline: dict | None
    reason: str | None = None


@dataclass(frozen=True)
class StageRecord(Record):
    """One stage as it ran: its share of the budget when it started, the seconds it spent, its measured
    rounds, its status (DECIDED, UNDECIDED, TOO_SHORT, INTERRUPTED, DONE), its plan in words, and
    needs_s: about what MIN_ROUNDS rounds of it take on this machine (None when unknown), which is
    what a "raise --budget" recommendation quotes."""

    name: str
    share_s: float
    spent_s: float
    rounds: int
    status: str
    plan: str
    needs_s: float | None


@dataclass(frozen=True)
class DiagnosisFinding(Record):
    """One finding: topic (what was looked at), finding (in words), evidence (the figures behind it),
    recommendation (None when the figures call for no change or do not decide), interval (the RoundsEstimate
    the finding rests on; None for counts, such as unreadable files, and for tests such as the cycle)."""

    topic: str
    finding: str
    evidence: dict
    recommendation: str | None
    interval: RoundsEstimate | None = None

    def lines(self) -> list[str]:
        figures = ", ".join(f"{key}={_fmt(value)}" for key, value in self.evidence.items())
        out = [f"[{self.topic}] {self.finding}", f"    evidence: {figures}"]
        if self.interval is not None:
            out.append(f"    interval: {interval_words(self.interval)}")
        if self.recommendation:
            out.append(f"    recommendation: {self.recommendation}")
        return out


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def interval_words(figure: RoundsEstimate) -> str:
    """'0.031-0.25 (median 0.12), 4 rounds, 88 % coverage; straddles 0.05' for people."""
    words = (f"{figure.low:.4g}–{figure.high:.4g} (median {figure.median:.4g}), {figure.rounds} round(s), "
             f"{figure.coverage:.0%} coverage")
    if figure.straddles:
        words += "; straddles " + ", ".join(f"{b:.4g}" for b in figure.straddles)
    return words


@dataclass(frozen=True)
class Diagnosis(Record):
    """Everything one diagnosis measured and concluded. complete: False while stages are missing (an
    interrupted run's checkpoint); stages: those that ran, in order. The measured parts are empty (or
    None) until their stage has ended. fingerprint: the machine's (machine.MachineFingerprint.as_dict()).
    trace: the profiler trace directory, if one was written."""

    dataset: str
    settings: DiagnoseSettings
    fingerprint: dict
    complete: bool
    elapsed_s: float
    stages: tuple[StageRecord, ...]
    data: DataSummary
    cache: CacheUse
    static_shapes: StaticShapes
    pipelines: tuple[PipelineFigures, ...]
    comparisons: tuple[LoaderComparison, ...]
    step: StepFigures | None
    input_bound: tuple[InputBoundFigures, ...]
    sweep: tuple[SweepAxis, ...]
    gpu: GpuFigures | None
    feed: tuple[FeedFigures, ...]
    trace: str | None
    verdicts: tuple[DiagnosisFinding, ...]

    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "kind": "dataset", **super().as_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: str = "diagnosis") -> Diagnosis:
        """Read back what as_dict() wrote (an older schema through its migrations), a checkpoint of an
        interrupted run included; RecordError names a wrong schema_version, kind or field."""
        return super().from_dict(without_kind(migrate(cls, data, where), "dataset", where), where)


@migration(Diagnosis, 4, 5)
def migrate_4_to_5(data: dict) -> dict:
    """Schema 5 names its kind ('dataset'), as a --pipeline run's file names 'pipeline'."""
    return {**data, "kind": "dataset"}


# ------------------------------------------------------------------------------------------ the budget


def split_budget(total_s: float, needs: Mapping[str, float]) -> dict[str, float]:
    """total_s split across the stages in proportion to what each needs (weights > 0), in needs' order.
    Nothing left (total_s <= 0) gives every stage 0 s."""
    if not needs:
        return {}
    for name, need in needs.items():
        if not need > 0:
            raise ValueError(f"needs[{name!r}]: expected a weight > 0, found {need!r}")
    weight = sum(needs.values())
    return {name: max(total_s, 0.0) * need / weight for name, need in needs.items()}


def calls_that_fit(share_s: float, call_s: float, *, most: int, rounds: int = TARGET_ROUNDS) -> int:
    """Calls per round (1..most) such that `rounds` rounds of calls costing call_s each fit share_s; a
    step's first steady call is what call_s is measured from."""
    if not call_s > 0:
        return most
    return max(1, min(most, math.floor(share_s / (rounds * call_s))))


@dataclass(frozen=True)
class RoundsOutcome:
    """How run_stage_rounds ended. rounds: measured rounds (warm-up not counted); spent_s: their time, warm-up
    included; round_s: the longest measured round (the warm-up round, or the estimate, when none was);
    stopped: 'decided', 'share spent' or 'max rounds'."""

    rounds: int
    spent_s: float
    round_s: float | None
    stopped: str

    @property
    def status(self) -> str:
        """The stage status this outcome gives: DECIDED, TOO_SHORT (< MIN_ROUNDS rounds) or UNDECIDED."""
        if self.stopped == "decided":
            return DECIDED
        return TOO_SHORT if self.rounds < MIN_ROUNDS else UNDECIDED


def run_stage_rounds(one_round: Callable[[int], None], *, decided: Callable[[], bool], share_s: float,
               clock: Callable[[], float] = time.monotonic, first_estimate_s: float | None = None,
               warmup_rounds: int = 0, max_rounds: int = MAX_ROUNDS,
               on_round: Callable[[int, float], None] = lambda rounds, spent_s: None) -> RoundsOutcome:
    """Call one_round(index) for index 0, 1, ... (the first warmup_rounds are warm-up, the caller discards
    their figures) until decided() holds after at least MIN_ROUNDS measured rounds, or max_rounds were
    measured, or the next round would overrun share_s. The next round is estimated as the longest
    measured one (before any, the warm-up round or first_estimate_s); with no estimate at all the first
    round runs if any share is left, since nothing else can tell what a round costs.
    on_round(measured rounds, seconds spent) follows every round."""
    start, index, durations, estimate_s = clock(), 0, [], first_estimate_s
    while True:
        measured = max(0, index - warmup_rounds)
        if measured >= MIN_ROUNDS and decided():
            stopped = "decided"
            break
        if measured >= max_rounds:
            stopped = "max rounds"
            break
        if share_s <= 0 or (estimate_s is not None and clock() - start + estimate_s > share_s):
            stopped = "share spent"
            break
        began = clock()
        one_round(index)
        took = clock() - began
        index += 1
        if index > warmup_rounds:
            durations.append(took)
        estimate_s = max(durations) if durations else took
        on_round(max(0, index - warmup_rounds), clock() - start)
    return RoundsOutcome(rounds=max(0, index - warmup_rounds), spent_s=clock() - start, round_s=estimate_s,
                         stopped=stopped)


@dataclass(frozen=True)
class Event:
    """One progress report. kind: 'plan' (the split of the budget), 'start', 'note', 'round' or 'end'.
    share_s: the stage's share of the budget (None for the run as a whole); spent_s: seconds spent in
    the stage; left_s: seconds left of the run's budget."""

    stage: str
    kind: str
    message: str
    share_s: float | None
    spent_s: float
    left_s: float


Progress = Callable[[Event], None]


def no_progress(event: Event) -> None:
    """The progress callback that reports nothing (the default when no one listens)."""


class Budget:
    """A run's budget: its clock, the time left, and each stage's share of what is left as it starts, in
    proportion to needs (what a stage leaves unspent goes to the stages after it)."""

    def __init__(self, total_s: float, needs: Mapping[str, float], clock: Callable[[], float]):
        self.total_s = float(total_s)
        self.clock = clock
        self.start = clock()
        self.needs = dict(needs)
        self.pending = list(needs)

    def elapsed_s(self) -> float:
        return self.clock() - self.start

    def left_s(self) -> float:
        return self.total_s - self.elapsed_s()

    def plan(self) -> dict[str, float]:
        return split_budget(self.left_s(), {name: self.needs[name] for name in self.pending})

    def take(self, name: str) -> float:
        share = self.plan()[name]
        self.pending.remove(name)
        return share


class Stage:
    """A stage as it runs: its share, its clock and progress reports, its rounds; record() is its
    StageRecord. The stage function sets plan and status."""

    def __init__(self, name: str, share_s: float, budget: Budget, progress: Progress):
        self.name = name
        self.share_s = share_s
        self.plan = ""
        self.status = DONE
        self.rounds = 0
        self._budget = budget
        self._progress = progress
        self._start = budget.clock()
        self._in_rounds_s = 0.0
        self._rounds_need_s: float | None = None
        self._running_rounds = 0  # rounds of a run_stage_rounds still going (an interrupt's record counts them)

    def spent_s(self) -> float:
        return self._budget.clock() - self._start

    def left_s(self) -> float:
        return self.share_s - self.spent_s()

    def tell(self, kind: str, message: str) -> None:
        self._progress(Event(self.name, kind, message, self.share_s, self.spent_s(), self._budget.left_s()))

    def rounds_until_decided(self, one_round: Callable[[int], None], *, decided: Callable[[], bool],
                             share_s: float | None = None, first_estimate_s: float | None = None,
                             warmup_rounds: int = 0, what: str = "") -> RoundsOutcome:
        """run_stage_rounds within share_s (default: what is left of the stage's share), reporting each round."""
        def on_round(rounds, spent_s):
            self._running_rounds = rounds
            self.tell("round", f"{what}round {rounds} measured" if rounds else f"{what}warm-up round done")

        outcome = run_stage_rounds(one_round, decided=decided, share_s=self.left_s() if share_s is None else share_s,
                             clock=self._budget.clock, first_estimate_s=first_estimate_s,
                             warmup_rounds=warmup_rounds, on_round=on_round)
        self.rounds += outcome.rounds
        self._running_rounds = 0
        self._in_rounds_s += outcome.spent_s
        if outcome.round_s is not None:
            self._rounds_need_s = (self._rounds_need_s or 0.0) + (warmup_rounds + MIN_ROUNDS) * outcome.round_s
        return outcome

    def record(self, status: str | None = None) -> StageRecord:
        needs = None
        if self._rounds_need_s is not None:
            needs = self.spent_s() - self._in_rounds_s + self._rounds_need_s
        return StageRecord(name=self.name, share_s=self.share_s, spent_s=self.spent_s(),
                           rounds=self.rounds + self._running_rounds, status=status or self.status, plan=self.plan,
                           needs_s=needs)


def _worst(statuses) -> str:
    """A stage's status from its parts' (TOO_SHORT before UNDECIDED before DECIDED)."""
    statuses = set(statuses)
    for status in (TOO_SHORT, UNDECIDED, DECIDED):
        if status in statuses:
            return status
    return DONE


class StageLog:
    """A diagnosis as it is measured: its parts so far and the stages that ran. snapshot() is the record
    of what exists, make(complete=, elapsed_s=, stages=, **parts) with its verdicts; after each stage it
    goes to checkpoint, so an interrupted run keeps it."""

    def __init__(self, *, make: Callable[..., Any], parts: dict[str, Any], budget: Budget, progress: Progress,
                 checkpoint: Callable[[Any], None] | None):
        self.make = make
        self.parts = dict(parts)
        self.budget = budget
        self.progress = progress
        self.checkpoint = checkpoint
        self.stages: list[StageRecord] = []

    def snapshot(self, *, complete: bool):
        return self.make(complete=complete, elapsed_s=self.budget.elapsed_s(), stages=tuple(self.stages),
                         **self.parts)

    def save(self, *, complete: bool = False) -> None:
        if self.checkpoint is not None:
            self.checkpoint(self.snapshot(complete=complete))

    def tell_plan(self, *, after: str = "checking the data") -> None:
        plan = self.budget.plan()
        split = ", ".join(f"{name.replace('_', '-')} {share:.0f} s" for name, share in plan.items())
        self.progress(Event("plan", "plan", f"budget {self.budget.total_s:.0f} s, {self.budget.left_s():.0f} s "
                                            f"left after {after}: {split} (a stage that decides early leaves its "
                                            "time to the next)", None, 0.0, self.budget.left_s()))

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[Stage]:
        """The stage `name` with its share of what is left; its record is kept and checkpointed when it ends,
        also when it is interrupted (then marked INTERRUPTED and the interrupt goes on)."""
        stage = Stage(name, self.budget.take(name), self.budget, self.progress)
        stage.tell("start", f"share {stage.share_s:.0f} s")
        try:
            yield stage
        except KeyboardInterrupt:
            self.stages.append(stage.record(INTERRUPTED))
            self.save()
            raise
        record = stage.record()
        self.stages.append(record)
        self.save()
        stage.tell("end", f"{record.status}: {record.rounds} round(s) in {record.spent_s:.0f} s")


# ------------------------------------------------------------------------------------------ the run


def diagnose(*, dataset_dir: Path, settings: DiagnoseSettings, cache_dir: Path | None = None,
             trace_dir: Path | None = None, progress: Progress = no_progress,
             checkpoint: Callable[[Diagnosis], None] | None = None,
             clock: Callable[[], float] = time.monotonic) -> Diagnosis:
    """Measure dataset_dir's readable files within settings.budget_s; return every figure, the stages as
    they ran and the verdicts.

    checkpoint(diagnosis) is called after check-data and after every stage with what exists so far
    (complete=False), and once more at the end (complete=True). Raises DataError when the dataset as a
    whole is unusable (no metadata.csv, nothing readable); a KeyboardInterrupt is passed on after the
    interrupted stage has been checkpointed as such.
    """
    from perfsuite.data.audio import MelConfig
    from perfsuite.data.loaders import check_dataset
    from perfsuite.measure.machine import machine_fingerprint

    stages = STAGES if trace_dir is not None else tuple(s for s in STAGES if s != "trace")
    budget = Budget(settings.budget_s, {name: STAGE_NEEDS[name] for name in stages}, clock)
    dataset_dir = Path(dataset_dir)
    mel_config = MelConfig()
    progress(Event("check", "start", "checking the data (check-data)", None, 0.0, budget.left_s()))
    report = check_dataset(dataset_dir, cache_dir=cache_dir, mel_config=mel_config)
    records = _readable(dataset_dir, mel_config)
    ids = [record.id for record in records]
    copies = repeat_copies(len(ids), settings)
    # A bad WAV can be listed twice (the WAV and its missing cache entry): count utterances, not problems.
    data = DataSummary(checked=report.checked, usable=len(ids), skipped=report.checked - len(ids),
                       sources=tuple(report.sources),
                       problems=tuple(Problem(path=p.path, reason=p.reason) for p in report.problems),
                       repeat=Repeat(copies=copies, utterances_measured=copies * len(ids),
                                     round_samples=_round_samples(settings)))
    shapes = StaticShapes(max_text_len=max(len(r.tokens) for r in records),
                          max_mel_frames=max(r.mel_frames for r in records))
    head = {"dataset": str(dataset_dir), "settings": settings, "fingerprint": machine_fingerprint().as_dict(),
            "data": data, "static_shapes": shapes}
    with (_usable_cache(dataset_dir, cache_dir, ids, mel_config, budget, progress) as (cache, built),
          _measured_view(dataset_dir, cache, ids, copies, budget, progress) as (measured_dir, measured_cache)):
        head["cache"] = CacheUse(dir=None if built else str(cache), temporary=built)
        run = StageLog(make=lambda **found: _with_verdicts(Diagnosis(**head, **found, verdicts=())),
                       parts={"pipelines": (), "comparisons": (), "step": None, "input_bound": (), "sweep": (),
                              "gpu": None, "feed": (), "trace": None},
                       budget=budget, progress=progress, checkpoint=checkpoint)
        run.save()
        run.tell_plan()
        _measure(run, dataset_dir=measured_dir, cache_dir=measured_cache, settings=settings, mel_config=mel_config,
                 trace_dir=trace_dir, shapes=shapes)
    final = run.snapshot(complete=True)
    if checkpoint is not None:
        checkpoint(final)
    return final


def _with_verdicts(diagnosis: Diagnosis) -> Diagnosis:
    return replace(diagnosis, verdicts=tuple(verdicts(diagnosis)))


def _readable(dataset_dir: Path, mel_config) -> list:
    """The utterances whose WAV the loaders can read (their records: id, tokens, mel_frames)."""
    from perfsuite.data.loaders import LoaderConfig, preflight
    from perfsuite.errors import DataError

    config = LoaderConfig(kind="tf_native", source="wav", on_error="skip")
    records, skipped = preflight(dataset_dir=dataset_dir, config=config, cache_dir=None, mel_config=mel_config)
    if not records:
        raise DataError(dataset_dir, expected="at least one readable utterance", found=f"none ({len(skipped)} skipped)")
    return records


@contextlib.contextmanager
def _usable_cache(dataset_dir: Path, cache_dir: Path | None, ids: list[str], mel_config, budget: Budget,
                  progress: Progress) -> Iterator[tuple[Path, bool]]:
    """(cache directory, whether it was built here): the given one, the default one, or one built in a
    temporary directory by corpus.build_cache from a view of the readable utterances only (build_cache
    stops at the first unreadable WAV)."""
    from perfsuite.data.corpus import build_cache, default_cache_dir

    if cache_dir is not None:
        yield Path(cache_dir), False
        return
    if default_cache_dir(dataset_dir, mel_config).is_dir():
        yield default_cache_dir(dataset_dir, mel_config), False
        return
    with tempfile.TemporaryDirectory(prefix="perfsuite-diagnose-cache-") as temporary:
        progress(Event("check", "note", "building a temporary .npy cache from the readable files", None,
                       budget.elapsed_s(), budget.left_s()))
        readable = Path(temporary) / "readable"
        _write_view(dataset_dir, None, entries=[(uid, uid) for uid in ids], root=readable, view_cache=None)
        yield build_cache(readable, mel_config=mel_config, cache_dir=Path(temporary) / "cache"), True


@contextlib.contextmanager
def _measured_view(dataset_dir: Path, cache_dir: Path, ids: list[str], copies: int, budget: Budget,
                   progress: Progress) -> Iterator[tuple[Path, Path]]:
    """(dataset dir, cache dir) to measure: the dataset itself, or a temporary view listing each of ids
    `copies` times when it is smaller than one measurement round."""
    if copies == 1:
        yield dataset_dir, cache_dir
        return
    progress(Event("check", "note", f"only {len(ids)} usable utterance(s): measuring on {copies} copies of each "
                   "(repeated epochs)", None, budget.elapsed_s(), budget.left_s()))
    with tempfile.TemporaryDirectory(prefix="perfsuite-diagnose-repeated-") as temporary:
        root, cache = Path(temporary) / "data", Path(temporary) / "cache"
        write_repeated_view(dataset_dir, cache_dir, ids=ids, copies=copies, root=root, view_cache=cache)
        yield root, cache


def _batch_sizes(settings: DiagnoseSettings) -> tuple[int, ...]:
    return tuple(sorted({settings.batch_size, *settings.sweep_batch_sizes}))


def _round_samples(settings: DiagnoseSettings) -> int:
    """Samples one measurement round draws at the largest batch size measured."""
    return max(_batch_sizes(settings)) * settings.batches


def repeat_copies(usable: int, settings: DiagnoseSettings) -> int:
    """How many times each usable utterance is listed for the measurements.

    1 when the utterances fill one measurement round at the largest batch size measured. Otherwise the
    fewest copies that do, with a total divisible by every batch size measured, so that every batch is
    full (a partial batch at each pass's end would recur at the same place in every round, a pattern
    cycle detection would report as a period) -- unless that would more than double the total (e.g. 511
    utterances and batch 32), where the fewest copies that fill a round are used.
    """
    if usable < 1:
        raise ValueError(f"usable: expected >= 1 utterance, found {usable}")
    needed = _round_samples(settings)
    if usable >= needed:
        return 1
    lcm = math.lcm(*_batch_sizes(settings))
    step = lcm // math.gcd(usable, lcm)
    full_batches = step * math.ceil(needed / (usable * step))
    return full_batches if full_batches * usable <= 2 * needed else math.ceil(needed / usable)


def write_repeated_view(dataset_dir: Path, cache_dir: Path | None, *, ids: list[str], copies: int, root: Path,
                        view_cache: Path | None) -> list[str]:
    """An LJSpeech-layout directory at root whose metadata.csv lists each utterance of ids `copies`
    times under the ids `<id>__r<k>`, each WAV (and cache entry, into view_cache) a link to the
    original file. Returns the view's ids."""
    width = len(str(copies - 1))
    entries = [(f"{uid}__r{copy:0{width}d}", uid) for copy in range(copies) for uid in ids]
    _write_view(dataset_dir, cache_dir, entries=entries, root=root, view_cache=view_cache)
    return [view_id for view_id, _ in entries]


def _write_view(dataset_dir: Path, cache_dir: Path | None, *, entries: list[tuple[str, str]], root: Path,
                view_cache: Path | None) -> None:
    """An LJSpeech-layout directory at root listing one utterance per (view id, original id) entry, its
    WAV (and, given cache_dir and view_cache, its cache entries) a link to the original file."""
    from perfsuite.data.corpus import cache_paths, read_metadata, wav_path

    utterances = {utt.id: utt for utt in read_metadata(dataset_dir)}
    (root / "wavs").mkdir(parents=True)
    if view_cache is not None:
        (view_cache / "mels").mkdir(parents=True)
        (view_cache / "tokens").mkdir(parents=True)
    lines = []
    for view_id, uid in entries:
        utt = utterances[uid]
        _link(wav_path(dataset_dir, uid), wav_path(root, view_id))
        if view_cache is not None and cache_dir is not None:
            for source, target in zip(cache_paths(cache_dir, uid), cache_paths(view_cache, view_id)):
                _link(source, target)
        lines.append(f"{view_id}|{utt.text}|{utt.normalized_text}\n")
    (root / "metadata.csv").write_text("".join(lines), encoding="utf-8")


def _link(source: Path, target: Path) -> None:
    """A symlink to source (absolute); a hard link or a copy where symlinks are not allowed."""
    source = Path(source).resolve()
    try:
        os.symlink(source, target)
    except OSError:
        try:
            os.link(source, target)
        except OSError:
            if source.exists():
                shutil.copyfile(source, target)


def _measure(run: StageLog, *, dataset_dir: Path, cache_dir: Path, settings: DiagnoseSettings, mel_config,
             trace_dir: Path | None, shapes: StaticShapes) -> None:
    """The stages in order; each one's figures go into run.parts as it ends."""
    loader = _loader_factory(dataset_dir, cache_dir, settings, mel_config, shapes)
    with run.stage("loaders") as stage:
        pipelines, comparisons = _loaders_stage(stage, loader, settings)
        run.parts.update(pipelines=pipelines, comparisons=comparisons)
    with run.stage("step") as stage:
        batch = next(iter(loader(Pipeline("tf_native", "cache"))))
        steps, step = _step_stage(stage, batch, settings, (None, shapes.max_text_len, shapes.max_mel_frames))
        run.parts["step"] = step
    fastest = steps[step.input_bound_mode]
    with run.stage("input_bound") as stage:
        gpu = _gpu_window()
        with gpu:
            figures = _input_bound_stage(stage, fastest, step.input_bound_call_s, batch, loader, settings)
        run.parts.update(input_bound=figures, gpu=gpu.result())
    with run.stage("feed") as stage:
        run.parts["feed"] = _feed_stage(stage, loader, settings, mel_config)
    with run.stage("sweep") as stage:
        run.parts["sweep"] = _sweep_stage(stage, loader, settings)
    if trace_dir is not None:
        with run.stage("trace") as stage:
            run.parts["trace"] = _trace_stage(stage, fastest, step.input_bound_call_s,
                                              loader(Pipeline("tf_native", "wav")), Path(trace_dir),
                                              settings.trace_steps)


def _loader_factory(dataset_dir: Path, cache_dir: Path, settings: DiagnoseSettings, mel_config, shapes):
    """loader(pipeline, batch_size=, workers=): its repeated tf.data pipeline, padded to the static shapes
    so the compiled step traces once; built once per setting (building one reads every file's header)."""
    from perfsuite.data.loaders import LoaderConfig, build_loader

    built = {}

    def loader(pipeline: Pipeline, *, batch_size: int = settings.batch_size, workers: int = settings.workers):
        key = (pipeline, batch_size, workers)
        if key not in built:
            config = LoaderConfig(kind=pipeline.kind, source=pipeline.source, batch_size=batch_size,
                                  num_parallel_calls=workers, static_shapes=True, max_text_len=shapes.max_text_len,
                                  max_mel_frames=shapes.max_mel_frames, on_error="skip")
            built[key] = build_loader(dataset_dir=dataset_dir, config=config, cache_dir=cache_dir,
                                      mel_config=mel_config).dataset.repeat()
        return built[key]

    return loader


# ------------------------------------------------------------------------------------ the loaders


def _loaders_stage(stage: Stage, loader, settings: DiagnoseSettings):
    """Every LOADER_PIPELINES loader in interleaved rounds (A B C D, D C B A, ...), a fresh iterator per
    round with settings.warmup untimed batches, until every LOADER_PAIRS ratio is decided or the share is
    spent. The first round is a short warm-up (start-up, first file reads: one batch each), whose time
    only sizes the next round. Returns (pipelines, comparisons), empty without a measured round."""
    from perfsuite.measure import timing

    datasets = {pipeline: loader(pipeline) for pipeline in LOADER_PIPELINES}
    runs = {pipeline: [] for pipeline in LOADER_PIPELINES}
    stage.plan = (f"{len(LOADER_PIPELINES)} loaders x ({settings.warmup} + {settings.batches}) batches per round, "
                  "interleaved, after a short warm-up round; rounds until the same-round ratios are decided")
    stage.tell("note", stage.plan)

    def one_round(index: int) -> None:
        batches = 1 if index == 0 else settings.batches  # the warm-up round: start-up and first reads only
        for pipeline in LOADER_PIPELINES if index % 2 == 0 else LOADER_PIPELINES[::-1]:
            runs[pipeline].append(timing.measure_dataset(dataset=datasets[pipeline], warmup_batches=settings.warmup,
                                                         measure_batches=batches, name=pipeline.label))

    def comparisons() -> tuple[LoaderComparison, ...]:
        return tuple(_loader_comparison(a, b, runs[a][1:], runs[b][1:]) for a, b in LOADER_PAIRS
                     if len(runs[a]) > 1)

    outcome = stage.rounds_until_decided(one_round, decided=lambda: all(c.ratio.decided for c in comparisons()),
                                         warmup_rounds=1)
    stage.status = outcome.status
    if outcome.rounds == 0:
        return (), ()
    return tuple(_pipeline_figures(p, runs[p]) for p in LOADER_PIPELINES), comparisons()


def _pipeline_figures(pipeline: Pipeline, measurements: list) -> PipelineFigures:
    """A loader's rounds (the first a warm-up) as PipelineFigures."""
    from perfsuite.measure import timing

    steady = measurements[1:]
    joined = timing.combine(steady, name=pipeline.label, first=measurements[0])
    return PipelineFigures(pipeline=pipeline, loader=joined.as_dict(),
                           samples_per_s=estimate([m.samples_per_s for m in steady]),
                           variation=estimate([m.summary.variation_ratio for m in steady], VARIATION_BOUNDARIES))


def _loader_comparison(a: Pipeline, b: Pipeline, a_rounds: list, b_rounds: list) -> LoaderComparison:
    from perfsuite.measure import stats

    ratios = stats.ratio_of([m.samples_per_s for m in a_rounds], [m.samples_per_s for m in b_rounds])
    boundaries = LOADER_BOUNDARIES if a.source == b.source else CACHE_BOUNDARIES
    return LoaderComparison(a=a, b=b, ratios=tuple(ratios), ratio=estimate(ratios, boundaries))


# --------------------------------------------------------------------------------------- the step


def _step_stage(stage: Stage, batch, settings: DiagnoseSettings, shapes) -> tuple[dict, StepFigures]:
    """The step in every STEP_MODES mode on one fixed batch: the first calls (trace, compile) and one
    steady call each, which size the rounds (calls_that_fit); then interleaved rounds (eager graph XLA,
    XLA graph eager, ...) until both STEP_RATIOS are decided or the share is spent. The first calls
    happen whatever the share: without them there is no step to measure.
    Returns ({mode: the step}, its figures)."""
    from perfsuite.measure import timing
    from perfsuite.workload.model import MODEL_PRESETS, make_train_step

    stage.tell("note", f"first calls of the {settings.model} step in eager, graph and XLA mode (trace, compile)")
    steps, first = {}, {}
    for mode in STEP_MODES:
        steps[mode] = make_train_step(model_config=MODEL_PRESETS[settings.model], mode=mode, input_shapes=shapes)
        first[mode] = timing.measure_step(step=steps[mode], batch=batch, warmup_calls=1, measure_calls=1,
                                          name=f"step-{mode}")
        stage.tell("note", f"{mode}: first call {first[mode].first_ns / 1e9:.2f} s, then "
                           f"{first[mode].batch_ns[0] / 1e9:.3f} s per call")
    round_call_s = sum(first[mode].batch_ns[0] / 1e9 for mode in STEP_MODES)
    calls = calls_that_fit(stage.left_s(), round_call_s, most=MAX_STEP_CALLS)
    stage.plan = (f"interleaved rounds of {calls} call(s) per mode, about {calls * round_call_s:.1f} s each, until "
                  f"graph/eager and XLA/graph are decided; {max(stage.left_s(), 0):.0f} s of the share left after the "
                  "first calls")
    stage.tell("note", stage.plan)
    traces_before = {mode: timing.tracing_count(step) for mode, step in steps.items()}
    per_round = {mode: [] for mode in STEP_MODES}

    def one_round(index: int) -> None:
        for mode in STEP_MODES if index % 2 == 0 else STEP_MODES[::-1]:
            per_round[mode].append(tuple(_timed_call(steps[mode], batch) for _ in range(calls)))

    outcome = stage.rounds_until_decided(
        one_round, decided=lambda: all(r.ratio.decided for r in _step_ratios(per_round).values()),
        first_estimate_s=calls * round_call_s)
    stage.status = outcome.status
    modes = {mode: _step_mode(first[mode], per_round[mode], traces_before[mode], timing.tracing_count(steps[mode]))
             for mode in STEP_MODES}
    ratios = _step_ratios(per_round)
    return steps, StepFigures(modes=modes, ratios=ratios, calls_per_round=calls,
                              input_bound_mode=_input_bound_mode(modes, ratios))


def _timed_call(step, batch) -> float:
    """Seconds of one step(batch) call, up to the readback of its output (so device work is finished)."""
    from perfsuite.measure.timing import host_readback

    start = time.perf_counter()
    host_readback(step(batch))
    return time.perf_counter() - start


def _step_ratios(per_round: dict[str, list]) -> dict[str, StepRatio]:
    """Per STEP_RATIOS name, the faster mode's speed over the slower one's in each round; {} before a round."""
    if not per_round[STEP_MODES[0]]:
        return {}
    means = {mode: [statistics.fmean(calls) for calls in rounds] for mode, rounds in per_round.items()}
    out = {}
    for name, (faster, slower) in STEP_RATIOS.items():
        rounds = tuple(s / f for s, f in zip(means[slower], means[faster]))
        out[name] = StepRatio(rounds=rounds, ratio=estimate(rounds, STEP_BOUNDARIES))
    return out


def _step_mode(first, rounds: list[tuple[float, ...]], traces_before: int | None, traces_after: int | None) -> StepMode:
    retraces = None if traces_before is None else traces_after - traces_before
    return StepMode(first_s=first.first_ns / 1e9, first_steady_s=first.batch_ns[0] / 1e9,
                    call_s=tuple(s for calls in rounds for s in calls),
                    step_s=estimate([statistics.fmean(calls) for calls in rounds]) if rounds else None,
                    traces=None if first.traces is None else first.traces + retraces, retraces=retraces)


def _input_bound_mode(modes: dict[str, StepMode], ratios: dict[str, StepRatio]) -> str:
    """The faster compiled mode: by the same-round XLA/graph ratio, else by the first steady calls."""
    if "xla_over_graph" in ratios:
        return "xla" if ratios["xla_over_graph"].ratio.median > 1 else "graph"
    return "xla" if modes["xla"].first_steady_s < modes["graph"].first_steady_s else "graph"


# ------------------------------------------------------------------------------ input-bound share


def _input_bound_stage(stage: Stage, step, call_s: float, batch, loader, settings: DiagnoseSettings):
    """The compiled step fed by each LOADER_PIPELINES pipeline and by the synthetic twin (the fixed batch
    repeated: every loader pads to the same static shapes, so one batch stands for all). A round runs
    the twin, the pipelines (reversed every other round), and the twin again; each pipeline's share
    uses the mean of the two twin sides, which sit at the same mean position in the round as the
    pipelines, so a drift within the round cancels and one slow twin side does not skew every share.
    Each side is a fresh iterator, closed when the side ends: its start-up falls in the untimed warm-up
    steps, and its teardown (which can take seconds) inside the round, where the round estimates see
    it. The step's seconds per call size the rounds; a pipeline leaves the rounds once its share is
    decided; the stage ends when all are, or when the share is spent."""
    from perfsuite._tensorflow import tensorflow

    pipelines, warmup = LOADER_PIPELINES, settings.warmup
    sides = len(pipelines) + 2
    batches = max(MIN_STEP_BATCHES, calls_that_fit(stage.left_s(), sides * call_s, most=MAX_STEP_CALLS) - warmup)
    round_s = sides * (warmup + batches) * call_s
    stage.plan = (f"rounds of {sides} sides (the synthetic twin, {len(pipelines)} pipelines, the twin again) x "
                  f"({warmup} untimed + {batches} timed steps of about {call_s:.3g} s), about {round_s:.1f} s per "
                  "round; a pipeline leaves the rounds once its share is decided")
    stage.tell("note", stage.plan)
    twin = tensorflow().data.Dataset.from_tensors(batch).repeat()
    synthetic_s, real_s = [], {pipeline: [] for pipeline in pipelines}

    def figures(pipeline: Pipeline) -> InputBoundFigures:
        rounds = real_s[pipeline]
        return _input_bound_figures(pipeline, rounds, synthetic_s[:len(rounds)], batches=batches, warmup=warmup)

    def undecided() -> list[Pipeline]:
        return [p for p in pipelines if not real_s[p] or not figures(p).share.decided]

    def one_round(index: int) -> None:
        active = undecided()
        before = _mean_step_s(step, twin, warmup=warmup, batches=batches)
        for pipeline in active if index % 2 == 0 else active[::-1]:
            real_s[pipeline].append(_mean_step_s(step, loader(pipeline), warmup=warmup, batches=batches))
        synthetic_s.append((before + _mean_step_s(step, twin, warmup=warmup, batches=batches)) / 2)

    outcome = stage.rounds_until_decided(one_round, decided=lambda: not undecided(), first_estimate_s=round_s)
    stage.status = outcome.status
    return tuple(figures(p) for p in pipelines if real_s[p])


def _mean_step_s(step, dataset, *, warmup: int, batches: int) -> float:
    """Mean seconds per step over `batches` steps, each with its fetch, after `warmup` untimed ones (the
    pipeline's start-up), on a fresh iterator over dataset. The mean, not a median: a pipeline that
    stalls every few batches costs exactly its stalls."""
    from perfsuite.measure.timing import host_readback

    batches_of = iter(dataset)
    for _ in range(warmup):
        host_readback(step(next(batches_of)))
    start = time.perf_counter()
    for _ in range(batches):
        host_readback(step(next(batches_of)))
    seconds = (time.perf_counter() - start) / batches
    del batches_of  # closed here, inside the round, not later in someone else's
    return seconds


def _input_bound_figures(pipeline: Pipeline, real_s, synthetic_s, *, batches: int, warmup: int) -> InputBoundFigures:
    """InputBoundFigures from the same rounds' seconds per step, fed by the pipeline and by the twin."""
    from perfsuite.measure import stats

    shares = [stats.input_bound_share(t_synthetic=s, t_real=r) for s, r in zip(synthetic_s, real_s)]
    share = estimate(shares, INPUT_BOUND_BOUNDARIES)
    return InputBoundFigures(pipeline=pipeline, share=share, classification=stats.classify_input_bound(share.median),
                             t_real=float(statistics.median(real_s)), t_synthetic=float(statistics.median(synthetic_s)),
                             real_round_s=tuple(real_s), synthetic_round_s=tuple(synthetic_s), batches=batches,
                             warmup=warmup)


# ------------------------------------------------------------------------------- the emulated GPU


def _feed_stage(stage: Stage, loader, settings: DiagnoseSettings, mel_config) -> tuple[FeedFigures, ...]:
    """Each LOADER_PIPELINES loader against an emulated accelerator: its feed rate, then a round at the
    settings.step_time step; the stage's share split evenly over the loaders still to measure."""
    stage.plan = (f"{len(LOADER_PIPELINES)} loaders: a feed-rate search each, then a round at the "
                  f"{settings.step_time} step")
    stage.tell("note", stage.plan)
    out = []
    for index, pipeline in enumerate(LOADER_PIPELINES):
        share_s = stage.left_s() / (len(LOADER_PIPELINES) - index)
        if share_s <= 0:
            stage.status = TOO_SHORT
            break
        figures = feed_figures(iter(loader(pipeline)), label=pipeline.label, step_time=settings.step_time,
                               share_s=share_s, mel_config=mel_config)
        out.append(figures)
        stage.rounds += 1
        stage.tell("round", f"{pipeline.label}: {feed_words(figures)}")
    else:
        stage.status = DECIDED if all(f.keeps_busy is not None for f in out) else UNDECIDED
    return tuple(out)


def feed_figures(source: Iterator, *, label: str, step_time: str | None, share_s: float,
                 mel_config=DEFAULT_MEL) -> FeedFigures:
    """The feed rate of an endless batch iterator (a search of FEED_SEARCH_SHARE of share_s), then one
    round at step_time (None: no round), of FEED_ROUND_SAMPLES utilisation samples where the rest of
    share_s holds them, else of its minimum batches (too short to detect a cycle). A step the batches
    cannot give (a per-frame preset on batches without mel_len) leaves the round out, with the reason."""

    result = feed_rate(source, config=FeedRateConfig(budget_s=FEED_SEARCH_SHARE * share_s), mel_config=mel_config)
    missing = {"step_s": None, "keeps_busy": None, "round": None, "stats": None, "timeline": None}
    if step_time is None:
        return FeedFigures(pipeline=label, feed=result.as_dict(), step_time=None, **missing,
                           reason="no step time given (--step-time)")
    step = parse_step_time(step_time)
    try:
        first_step_s = step.seconds(next(source))
    except ValueError as error:
        return FeedFigures(pipeline=label, feed=result.as_dict(), step_time=step_time, **missing,
                           reason=f"step {step_time}: {error}; give --step-time SECONDS for a fixed step")
    fits = FEED_ROUND_SAMPLES * max(first_step_s, MIN_INTERVAL_S) <= (1 - FEED_SEARCH_SHARE) * share_s
    run = run_emulated(source, step=step, mel_config=mel_config, config=EmulatedRunConfig(
        batches=8, warmup_batches=1, min_samples=FEED_ROUND_SAMPLES if fits else 0))
    step_s = statistics.median(run.step_s)
    return FeedFigures(pipeline=label, feed=result.as_dict(), step_time=step_time, step_s=step_s,
                       keeps_busy=keeps_busy(result.step_s, result.step_low_s, result.step_high_s, step_s),
                       round=run.as_dict(), stats=emulated_figures(emulated_stats(run)),
                       timeline=run.timeline.as_dict())


def keeps_busy(fed_s: float | None, low_s: float | None, high_s: float | None, step_s: float) -> bool | None:
    """Whether a step of step_s is kept >= 90 % busy, from a feed rate's interval: True at or above its
    upper end, False at or below its lower end (a step seen to fail), None inside it."""
    if fed_s is None:  # no step up to low_s was kept busy
        return False if step_s <= low_s else None
    if step_s >= high_s:
        return True
    return False if low_s is not None and step_s <= low_s else None


def feed_words(figures: FeedFigures) -> str:
    """'feeds steps down to 3.1 ms (327 steps/s, interval 275-463)' or why there is no figure."""
    feed = figures.feed
    if feed["feed_step_s"] is None:
        return f"kept no step up to {feed['feed_step_low_s'] * 1e3:.4g} ms >= 90 % busy"
    low, high = feed["feed_steps_per_s_interval"]
    upper = "no upper end" if high is None else f"{high:.4g}"
    audio = feed["feed_audio_s_per_s"]
    return (f"feeds steps down to {feed['feed_step_s'] * 1e3:.3g} ms ({feed['feed_steps_per_s']:.4g} steps/s, "
            f"interval {low:.4g}-{upper}" + (f"; {audio:,.0f} audio-s/s)" if audio is not None else ")"))


# -------------------------------------------------------------------------------------- the sweep


def sweep_points(axis: str, settings: DiagnoseSettings) -> tuple[int, ...]:
    """The points of a sweep axis, the current setting included, in increasing order (AUTOTUNE first)."""
    if axis == "workers":
        return tuple(sorted({*settings.sweep_workers, settings.workers}))
    if axis == "batch_size":
        return tuple(sorted({*settings.sweep_batch_sizes, settings.batch_size}))
    raise ValueError(f"axis: expected one of {SWEEP_AXES}, found {axis!r}")


def _sweep_batches(axis: str, point: int, settings: DiagnoseSettings) -> int:
    """Steady batches per round: on the batch-size axis, about as many samples as the current batch size's
    round (so every point's round takes about as long), at least 2."""
    if axis == "workers":
        return settings.batches
    return max(2, round(settings.batches * settings.batch_size / point))


def _sweep_stage(stage: Stage, loader, settings: DiagnoseSettings) -> tuple[SweepAxis, ...]:
    """Both SWEEP_AXES, the stage's share split between them by their number of points."""
    weights = {axis: float(len(sweep_points(axis, settings))) for axis in SWEEP_AXES}
    stage.plan = (f"tf_native WAV samples/s at {int(weights['workers'])} worker counts, then at "
                  f"{int(weights['batch_size'])} batch sizes, in interleaved rounds after a warm-up round; the "
                  "share split by points")
    stage.tell("note", stage.plan)
    axes, statuses = [], []
    for axis in SWEEP_AXES:
        share = split_budget(stage.left_s(), weights)[axis]
        weights.pop(axis)
        figures, status = _sweep_axis(stage, axis, loader, settings, share)
        statuses.append(status)
        if figures is not None:
            axes.append(figures)
    stage.status = _worst(statuses)
    return tuple(axes)


def _sweep_axis(stage: Stage, axis: str, loader, settings: DiagnoseSettings, share_s: float):
    """(SweepAxis or None without a measured round, status): tf_native WAV samples/s at every point of
    the axis in interleaved rounds (a fresh iterator per round, its first settings.warmup batches
    untimed), until every point's ratio to the current one is decided or share_s is spent."""
    from perfsuite.measure import timing

    points = sweep_points(axis, settings)
    current = settings.workers if axis == "workers" else settings.batch_size
    datasets = {point: loader(Pipeline("tf_native", "wav"), **{axis: point}) for point in points}
    batches = {point: _sweep_batches(axis, point, settings) for point in points}
    values, order = {point: [] for point in points}, []

    def one_round(index: int) -> None:
        sequence = points if index % 2 == 0 else points[::-1]
        found = {point: timing.measure_dataset(dataset=datasets[point], warmup_batches=settings.warmup,
                                               measure_batches=batches[point] if index else 1,
                                               name=f"sweep-{axis}-{point}")
                 for point in sequence}
        if index >= 1:  # round 0 is the warm-up
            for point in points:
                values[point].append(found[point].samples_per_s)
            order.append(sequence)

    def figures() -> SweepAxis | None:
        if not order:
            return None
        return sweep_figures(axis=axis, current=current, values=values, order=order, batches=batches)

    def decided() -> bool:
        return all(point.ratio.decided for point in figures().points if point.ratio is not None)

    outcome = stage.rounds_until_decided(one_round, decided=decided, share_s=share_s, warmup_rounds=1,
                                         what=f"{axis.replace('_', ' ')}: ")
    return figures(), outcome.status


def sweep_figures(*, axis: str, current: int, values: dict, order=(), batches: dict | None = None) -> SweepAxis:
    """One sweep axis from per-round samples/s ({point: [per round]}, the same rounds for every point):
    per point the median, range, relative spread and interval over the rounds and, for every point but
    the current one, the same-round ratios to the current point with their paired test (stats.paired_gain:
    significant means faster beyond the round-to-round noise) and their RoundsEstimate against
    SWEEP_BOUNDARIES. order: the points' order in each round; batches: {point: steady batches per round}."""
    from perfsuite.measure import stats

    if current not in values:
        raise ValueError(f"current: expected one of the measured points {sorted(values)}, found {current!r}")
    points = []
    for point, per_round in values.items():
        per_round = tuple(float(v) for v in per_round)
        median = float(statistics.median(per_round))
        gain = ratio = None
        if point != current:
            paired = stats.paired_gain(candidate=per_round, reference=values[current], alpha=SWEEP_ALPHA,
                                       min_effect=SWEEP_MIN_GAIN, min_win_share=SWEEP_MIN_WIN_SHARE)
            gain, ratio = paired.as_dict(), estimate(paired.ratios, SWEEP_BOUNDARIES)
        points.append(SweepPoint(point=point, current=point == current, batches=(batches or {}).get(point),
                                 samples_per_s=median, samples_per_s_low=min(per_round),
                                 samples_per_s_high=max(per_round),
                                 samples_per_s_spread=(max(per_round) - min(per_round)) / median,
                                 samples_per_s_rounds=per_round, interval=estimate(per_round), vs_current=gain,
                                 ratio=ratio))
    return SweepAxis(axis=axis, current=current, rounds=len(values[current]), min_gain=SWEEP_MIN_GAIN,
                     min_win_share=SWEEP_MIN_WIN_SHARE, alpha=SWEEP_ALPHA, points=tuple(points),
                     order=tuple(tuple(labels) for labels in order))


# -------------------------------------------------------------------------------- trace and GPU


def _trace_stage(stage: Stage, step, call_s: float, dataset, trace_dir: Path, steps: int) -> str | None:
    """A profiler trace when its steps fit the share; otherwise TOO_SHORT and no trace."""
    need_s = (2 + steps) * call_s
    stage.plan = f"a profiler trace of {steps} steady steps after 2 untimed ones, about {need_s:.1f} s"
    if need_s > stage.left_s():
        stage.status = TOO_SHORT
        stage.tell("note", f"skipped: it needs about {need_s:.0f} s, {max(stage.left_s(), 0):.0f} s are left")
        return None
    stage.tell("note", stage.plan)
    return _trace(step, dataset, trace_dir, steps)


def _trace(step, dataset, trace_dir: Path, steps: int) -> str:
    """A TensorBoard profiler trace of `steps` steady steps (two untimed steps first)."""
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()
    iterator = iter(dataset)
    for _ in range(2):
        step(next(iterator)).numpy()
    trace_dir.mkdir(parents=True, exist_ok=True)
    tf.profiler.experimental.start(str(trace_dir))
    try:
        for _ in range(steps):
            step(next(iterator)).numpy()
    finally:
        tf.profiler.experimental.stop()
    return str(trace_dir)


class _gpu_window:
    """GPU sampling around a block when a GPU can be sampled; otherwise records why not."""

    def __init__(self):
        self._sampler = None
        self._reason = None

    def __enter__(self):
        from perfsuite.errors import GpuUnavailable
        from perfsuite.measure.gpu import GpuSampler

        sampler = GpuSampler()
        try:
            sampler.__enter__()
        except GpuUnavailable as error:
            self._reason = error.reason
            return self
        self._sampler = sampler
        return self

    def __exit__(self, *exc_info):
        if self._sampler is not None:
            return self._sampler.__exit__(*exc_info)
        return False

    def result(self) -> GpuFigures:
        if self._sampler is None:
            return GpuFigures(available=False, reason=self._reason)
        from perfsuite.measure.gpu import gpu_stats

        timeline = self._sampler.timeline
        try:
            figures = gpu_stats(timeline).as_dict()
        except ValueError as error:  # sampled, but no utilisation sample fell in the window
            return GpuFigures(available=True, reason=str(error), timeline=timeline.as_dict())
        return GpuFigures(available=True, stats=figures, timeline=timeline.as_dict())


# ------------------------------------------------------------------------------------------ verdicts


def verdicts(diagnosis: Diagnosis) -> list[DiagnosisFinding]:
    """Findings derived from a diagnosis' figures, in a fixed order of topics; parts not measured (an
    interrupted run, a stage without time) give none, and the stage findings say why."""
    return [*data_verdicts(diagnosis.data),
            *stage_verdicts(diagnosis.stages, budget_s=diagnosis.settings.budget_s),
            *loader_verdicts(diagnosis.comparisons), *cache_verdicts(diagnosis.comparisons),
            *(step_verdicts(diagnosis.step) if diagnosis.step is not None else []),
            *input_bound_verdicts(diagnosis.input_bound, diagnosis.pipelines),
            *variation_verdicts(diagnosis.pipelines), *sweep_verdicts(diagnosis.sweep),
            *(gpu_verdicts(diagnosis.gpu) if diagnosis.gpu is not None else []),
            *feed_verdicts(diagnosis.feed)]


def _times(value: float) -> str:
    return f"{value:.2f}x"


def _percent(value: float) -> str:
    return f"{value:.0%}"


def why_undecided(figure: RoundsEstimate, fmt: Callable[[float], str] = _fmt) -> str | None:
    """In words, why figure does not decide its class (too few rounds, or a boundary inside its
    interval); None when it does."""
    if figure.rounds < MIN_ROUNDS:
        return f"{TOO_SHORT} ({figure.rounds} round(s); a decision needs {MIN_ROUNDS})"
    if figure.straddles:
        edges = " and ".join(fmt(b) for b in figure.straddles)
        return f"undecided: its interval {fmt(figure.low)}–{fmt(figure.high)} straddles the {edges} boundary"
    return None


def span_words(figure: RoundsEstimate, fmt: Callable[[float], str]) -> str:
    return f"interval {fmt(figure.low)}–{fmt(figure.high)} over {figure.rounds} rounds"


def estimate_evidence(name: str, figure: RoundsEstimate) -> dict:
    return {name: figure.median, f"{name}_low": figure.low, f"{name}_high": figure.high, "rounds": figure.rounds,
            "coverage": round(figure.coverage, 3)}


def data_verdicts(data: DataSummary) -> list[DiagnosisFinding]:
    out = []
    if data.skipped:
        out.append(DiagnosisFinding("data", f"{data.skipped} unreadable file(s) skipped; measured on the rest",
                           {"checked": data.checked, "skipped": data.skipped, "usable": data.usable},
                           "fix or convert the files listed by `perfsuite check-data` (16-bit PCM mono at the "
                           "expected sample rate); until then they are missing from training"))
    repeat = data.repeat
    if repeat.copies > 1:
        out.append(DiagnosisFinding(
            "data-size", f"only {data.usable} usable utterance(s), fewer than one measurement round draws "
            f"({repeat.round_samples} samples): measured on {repeat.copies} copies of each "
            f"({repeat.utterances_measured} per pass, epochs repeated) so that batches are full; "
            f"the figures describe these {data.usable} files",
            {"usable": data.usable, "copies": repeat.copies, "utterances_measured": repeat.utterances_measured,
             "round_samples": repeat.round_samples},
            f"for figures that stand for a whole corpus, diagnose at least {repeat.round_samples} of its "
            "utterances (one round's worth), or measure fewer --batches"))
    return out


def stage_verdicts(stages: tuple[StageRecord, ...], *, budget_s: float) -> list[DiagnosisFinding]:
    """A finding for each stage that was interrupted, had too little time, or spent its share undecided."""
    out = []
    for stage in stages:
        topic = f"stage-{stage.name.replace('_', '-')}"
        evidence = {"share_s": round(stage.share_s, 1), "spent_s": round(stage.spent_s, 1), "rounds": stage.rounds,
                    "needs_s": None if stage.needs_s is None else round(stage.needs_s, 1)}
        if stage.status == INTERRUPTED:
            out.append(DiagnosisFinding(topic, "interrupted: the figures of this stage are missing", evidence, None))
        elif stage.status == TOO_SHORT:
            out.append(DiagnosisFinding(topic, f"{TOO_SHORT}: {stage.rounds} round(s) in its {stage.share_s:.0f} s share; a "
                               f"decision needs {MIN_ROUNDS}", evidence, _more_budget(stage, budget_s)))
        elif stage.status == UNDECIDED:
            out.append(DiagnosisFinding(topic, f"its {stage.share_s:.0f} s share was spent after {stage.rounds} rounds, "
                               "before every figure was decided (see the findings below)", evidence,
                               "a longer --budget narrows the intervals"))
    return out


def _more_budget(stage: StageRecord, budget_s: float) -> str:
    if stage.needs_s is None or stage.share_s <= 0 or stage.needs_s <= stage.share_s:
        return "raise --budget"
    return (f"raise --budget to about {math.ceil(budget_s * stage.needs_s / stage.share_s)} s (this stage needs "
            f"about {stage.needs_s:.0f} s for {MIN_ROUNDS} rounds on this machine)")


def loader_verdicts(comparisons: tuple[LoaderComparison, ...]) -> list[DiagnosisFinding]:
    return [_loader_verdict(c) for c in comparisons if c.a.source == c.b.source]


def _loader_verdict(comparison: LoaderComparison) -> DiagnosisFinding:
    a, b, source, figure = comparison.a.kind, comparison.b.kind, comparison.a.source, comparison.ratio
    ratio, topic = figure.median, f"loader-{source}"
    evidence = estimate_evidence(f"{a}_over_{b}", figure)
    why = why_undecided(figure, _times)
    if why:
        return DiagnosisFinding(topic, f"{a} vs {b} {source} loader: {why}; median {ratio:.2f}x", evidence, None, figure)
    span = span_words(figure, _times)
    if ratio >= MATERIAL_SPEEDUP:
        strength = f" ({LOADER_STRENGTHS[a]})" if a in LOADER_STRENGTHS else ""
        return DiagnosisFinding(topic, f"{b} {source} loader is {ratio:.1f}x slower than {a} ({span})", evidence,
                       f"switch the {source} loader to {a}{strength}", figure)
    if ratio <= 1 / MATERIAL_SPEEDUP:
        return DiagnosisFinding(topic, f"{a} {source} loader is {1 / ratio:.1f}x slower than {b} ({span})", evidence,
                       f"keep the {b} {source} loader on this machine", figure)
    return DiagnosisFinding(topic, f"{a} and {b} {source} loaders are within {MATERIAL_SPEEDUP:.1f}x of each other "
                   f"({ratio:.2f}x, {span})", evidence, None, figure)


def cache_verdicts(comparisons: tuple[LoaderComparison, ...]) -> list[DiagnosisFinding]:
    return [_cache_verdict(c) for c in comparisons if c.a.kind == c.b.kind and c.a.source == "cache"]


def _cache_verdict(comparison: LoaderComparison) -> DiagnosisFinding:
    figure, kind = comparison.ratio, comparison.a.kind
    ratio = figure.median
    evidence = estimate_evidence("cache_over_wav", figure)
    why = why_undecided(figure, _times)
    if why:
        return DiagnosisFinding("cache", f"{kind} .npy cache vs WAV: {why}; median {ratio:.2f}x", evidence, None, figure)
    if ratio >= MATERIAL_SPEEDUP:
        return DiagnosisFinding("cache", f"the .npy cache loads {ratio:.1f}x faster than decoding WAVs "
                       f"({span_words(figure, _times)})", evidence,
                       "precompute the mels once (perfsuite.data.corpus.build_cache) and train from the cache", figure)
    return DiagnosisFinding("cache", f"the .npy cache is not materially faster than the WAVs ({ratio:.2f}x, "
                   f"{span_words(figure, _times)})", evidence, None, figure)


def step_verdicts(step: StepFigures) -> list[DiagnosisFinding]:
    """From same-round ratios of the modes (they ran interleaved), not ratios of means taken apart."""
    modes = step.modes
    firsts = {f"{mode}_first_s": modes[mode].first_s for mode in STEP_MODES}
    out = []
    if not step.ratios:
        out.append(DiagnosisFinding("step", f"{TOO_SHORT}: no round of steady calls fit after the first calls", {
            **firsts, **{f"{mode}_first_steady_s": modes[mode].first_steady_s for mode in STEP_MODES}}, None))
    if "graph_over_eager" in step.ratios:
        out.append(_graph_verdict(step.ratios["graph_over_eager"].ratio, firsts))
    if "xla_over_graph" in step.ratios:
        out.append(_xla_verdict(step.ratios["xla_over_graph"].ratio, modes["xla"].first_s, firsts))
    retraces = {mode: modes[mode].retraces for mode in ("graph", "xla")}
    if any(retraces.values()):
        out.append(DiagnosisFinding("retracing", "the step retraced in the steady state", {"retraces": retraces},
                           "pad batches to static shapes (LoaderConfig(static_shapes=True)) or bucket lengths"))
    return out


def _graph_verdict(figure: RoundsEstimate, firsts: dict) -> DiagnosisFinding:
    gain, evidence = figure.median, {**estimate_evidence("graph_over_eager", figure), **firsts}
    why = why_undecided(figure, _times)
    if why:
        return DiagnosisFinding("step-graph", f"graph vs eager step: {why}; median {gain:.2f}x", evidence, None, figure)
    span = span_words(figure, _times)
    if gain >= MATERIAL_STEP_SPEEDUP:
        return DiagnosisFinding("step-graph", f"eager step is {gain:.1f}x slower than tf.function ({span})", evidence,
                       "wrap the training step in tf.function", figure)
    if gain <= 1 / MATERIAL_STEP_SPEEDUP:
        return DiagnosisFinding("step-graph", f"tf.function step is {1 / gain:.1f}x slower than eager ({span})", evidence,
                       None, figure)
    return DiagnosisFinding("step-graph", f"eager and graph steps are within {MATERIAL_STEP_SPEEDUP:.1f}x of each other "
                   f"({gain:.2f}x, {span})", evidence, None, figure)


def _xla_verdict(figure: RoundsEstimate, first_s: float, firsts: dict) -> DiagnosisFinding:
    gain, evidence = figure.median, {**estimate_evidence("xla_over_graph", figure), **firsts}
    why = why_undecided(figure, _times)
    if why:
        return DiagnosisFinding("step-xla", f"XLA vs graph step: {why}; median {gain:.2f}x", evidence, None, figure)
    span = span_words(figure, _times)
    if gain >= MATERIAL_STEP_SPEEDUP:
        return DiagnosisFinding("step-xla", f"XLA step is {gain:.1f}x faster than graph mode ({span}; first call "
                       f"{first_s:.2f} s)", evidence,
                       "compile the step with tf.function(jit_compile=True) and static input shapes", figure)
    if gain <= 1 / MATERIAL_STEP_SPEEDUP:
        return DiagnosisFinding("step-xla", f"XLA step is {1 / gain:.1f}x slower than graph mode ({span})", evidence,
                       "keep jit_compile off for this model on this machine", figure)
    return DiagnosisFinding("step-xla", f"XLA and graph steps are within {MATERIAL_STEP_SPEEDUP:.1f}x of each other "
                   f"({gain:.2f}x, {span})", evidence, None, figure)


def input_bound_verdicts(figures: tuple[InputBoundFigures, ...],
                         pipelines: tuple[PipelineFigures, ...] = ()) -> list[DiagnosisFinding]:
    """A finding per pipeline; a pipeline that waits is pointed at the fastest loader whose share is
    decided 'not input-bound'."""
    speed = {p.pipeline: p.samples_per_s.median for p in pipelines}
    fed = [f for f in figures if f.share.decided and f.classification == "not input-bound"]
    best = max(fed, key=lambda f: speed.get(f.pipeline, 0.0)) if fed else None
    return [_input_bound_verdict(f, best) for f in figures]


def _input_bound_verdict(figures: InputBoundFigures, best: InputBoundFigures | None) -> DiagnosisFinding:
    name, figure, label = figures.pipeline.label, figures.share, figures.classification
    share = figure.median
    evidence = {**estimate_evidence("share", figure), "t_real_s": figures.t_real, "t_synthetic_s": figures.t_synthetic}
    why = why_undecided(figure, _percent)
    if why:
        return DiagnosisFinding(f"input-{name}", f"{name}: {why}; median share {share:.0%} ({label} at the median)",
                       evidence, None, figure)
    recommendation = None
    if label != "not input-bound":
        recommendation = (f"use the {best.pipeline.label} pipeline (not input-bound: share "
                          f"{max(best.share.median, 0):.0%})" if best else
                          "the step waits for input: add parallel map calls, prefetch, or a faster loader")
    waits = (f"{share:.0%} of step time waits for input" if share >= 0 else
             f"share {share:.0%}: fed faster than its synthetic twin, i.e. no measurable wait, the rest noise")
    return DiagnosisFinding(f"input-{name}", f"{name} is {label} ({waits}; {span_words(figure, _percent)})", evidence,
                   recommendation, figure)


def variation_verdicts(pipelines: tuple[PipelineFigures, ...]) -> list[DiagnosisFinding]:
    out = []
    for figures in pipelines:
        loader, name, figure = figures.loader, figures.pipeline.label, figures.variation
        evidence = {**estimate_evidence("variation", figure), "batches": loader["batches"],
                    "cycle_period": loader["cycle_period"]}
        if loader["cycle_significant"]:
            out.append(DiagnosisFinding(f"cycle-{name}", f"{name}: per-batch times repeat every {loader['cycle_period']} "
                               "batches", evidence,
                               "periodic stalls: a slow element every period (long files, GC, a shared disk); "
                               "raise prefetch or parallelism so the stall is hidden"))
        elif figure.median >= UNSTABLE_VARIATION:
            why = why_undecided(figure, _percent)
            out.append(DiagnosisFinding(f"variation-{name}", f"{name}: per-batch times vary by {figure.median:.0%} of the "
                               f"mean ({why or span_words(figure, _percent)})", evidence, None, figure))
    return out


def point_label(axis: str, point: int) -> str:
    """A sweep point in words: '2 workers', 'AUTOTUNE workers', 'batch 16'."""
    if axis == "workers":
        return "AUTOTUNE workers" if point == -1 else f"{point} worker{'s' if point != 1 else ''}"
    return f"batch {point}"


def sweep_verdicts(sweep: tuple[SweepAxis, ...]) -> list[DiagnosisFinding]:
    found = (_sweep_verdict(figures) for figures in sweep)
    return [verdict for verdict in found if verdict is not None]


def _sweep_verdict(figures: SweepAxis) -> DiagnosisFinding | None:
    axis, rounds = figures.axis, figures.rounds
    compared = [point for point in figures.points if point.vs_current is not None]
    if not compared:
        return None
    clear = [point for point in compared if point.vs_current["significant"] and point.ratio.decided]
    chosen = max(clear or compared, key=lambda point: point.ratio.median)
    gain, figure = chosen.vs_current, chosen.ratio
    best, now = point_label(axis, chosen.point), point_label(axis, figures.current)
    prefix = "w" if axis == "workers" else "bs"
    evidence = {f"{prefix}{point.point}_samples_per_s": point.samples_per_s for point in figures.points}
    evidence.update({"current": now, "best": best, "ratio_median": figure.median, "ratio_low": figure.low,
                     "ratio_high": figure.high, "rounds_faster": f"{gain['wins']}/{rounds}",
                     "coverage": round(figure.coverage, 3)})
    if gain["p_value"] is not None:
        evidence["p_value"] = gain["p_value"]
    per_round = (f"{figure.median:.2f}x (interval {figure.low:.2f}-{figure.high:.2f}x, "
                 f"faster in {gain['wins']}/{rounds} rounds"
                 + (f", p={gain['p_value']:.2g})" if gain["p_value"] is not None else ")"))
    setting = "worker count" if axis == "workers" else "batch size"
    if clear:
        return DiagnosisFinding(axis, f"the tf_native WAV loader with {best} delivers {per_round} the samples/s "
                       f"of the current {now}", evidence, _sweep_recommendation(axis, chosen.point), figure)
    why = why_undecided(figure, _times)
    if rounds < MIN_ROUNDS:
        return DiagnosisFinding(axis, f"{why}: no {setting} recommendation (best: {best} at {per_round} vs {now})", evidence,
                       None, figure)
    undecided = f"; {why}" if why else ""
    if figure.median < 1:
        return DiagnosisFinding(axis, f"no {setting} was faster than the current {now} in the same rounds (closest: "
                       f"{best} at {per_round}){undecided}", evidence, None, figure)
    return DiagnosisFinding(axis, f"no {setting} beats the current {now} beyond the round-to-round noise (best: {best} at "
                   f"{per_round}; a recommendation needs a median gain >= {SWEEP_MIN_GAIN:.0%}, >= "
                   f"{SWEEP_MIN_WIN_SHARE:.0%} of rounds faster and p < {SWEEP_ALPHA}){undecided}", evidence, None,
                   figure)


def _sweep_recommendation(axis: str, point: int) -> str:
    if axis == "workers":
        return f"set num_parallel_calls={'tf.data.AUTOTUNE' if point == -1 else point}"
    return f"batch {point} if the step is input-bound and training allows it (batch size also changes the optimisation)"


def feed_verdicts(feed: tuple[FeedFigures, ...]) -> list[DiagnosisFinding]:
    return [feed_verdict(figures) for figures in feed]


def feed_verdict(figures: FeedFigures) -> DiagnosisFinding:
    """Would this pipeline keep a GPU of the step asked for busy? Decided from the feed rate's interval;
    the round at the step is the evidence (its busy fraction, idle share, oscillation)."""
    label, feed = figures.pipeline, figures.feed
    evidence = {"feed_step_s": feed["feed_step_s"], "feed_step_low_s": feed["feed_step_low_s"],
                "feed_step_high_s": feed["feed_step_high_s"], "feed_steps_per_s": feed["feed_steps_per_s"],
                "feed_audio_s_per_s": feed["feed_audio_s_per_s"]}
    topic, fed = f"feed-{label}", feed_words(figures)
    if figures.step_s is None:
        return DiagnosisFinding(topic, f"{label} {fed}; {figures.reason}", evidence, None)
    stats = figures.stats
    evidence.update({"step_s": figures.step_s, "busy_fraction": figures.round["busy_fraction"],
                     "util_median_pct": stats["emulated_util_median"],
                     "idle_fraction": stats["emulated_idle_fraction"],
                     "oscillation_period_s": stats["emulated_oscillation_period_s"]})
    step = f"a {figures.step_s * 1e3:.3g} ms step ({figures.step_time})"
    measured = f"busy {figures.round['busy_fraction']:.0%} in a round at that step"
    if stats["emulated_oscillation"]:
        measured += f", utilisation oscillating every {stats['emulated_oscillation_period_s']:.3g} s"
    if figures.keeps_busy:
        return DiagnosisFinding(topic, f"{label} keeps {step} >= 90 % busy: it {fed}; {measured}", evidence, None)
    if figures.keeps_busy is False:
        return DiagnosisFinding(topic, f"{label} would starve {step}: it {fed}; {measured}", evidence,
                       "the GPU would wait for input: a faster loader (see the loader findings), more parallel "
                       "calls, prefetch, or the .npy cache")
    return DiagnosisFinding(topic, f"{label} vs {step}: undecided, the step lies inside the feed rate's interval: it {fed}; "
                   f"{measured}", evidence, None)


def gpu_verdicts(gpu: GpuFigures) -> list[DiagnosisFinding]:
    if not gpu.available or not gpu.stats:
        return []
    stats = gpu.stats
    evidence = {"util_median_pct": stats["gpu_util_median"], "idle_fraction": stats["gpu_idle_fraction"],
                "oscillation_period_s": stats["gpu_oscillation_period_s"]}
    if stats["gpu_util_median"] < GPU_IDLE_MEDIAN_PCT:
        return [DiagnosisFinding("gpu", f"GPU busy only {stats['gpu_util_median']:.0f}% (median) while training", evidence,
                        "the GPU waits: see the input-bound findings above")]
    return [DiagnosisFinding("gpu", f"GPU busy {stats['gpu_util_median']:.0f}% (median)", evidence, None)]
