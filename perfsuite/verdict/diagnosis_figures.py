"""What a diagnosis holds (`perfsuite diagnose`, tools/diagnose/): its settings, every figure as a
record, the findings, and the versioned JSON schema with its migrations. The wording of the findings is in
verdict/diagnosis.py; docs/diagnose.md gives the reasons behind each threshold."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from perfsuite.measure.emulated import (  # no TensorFlow
    DEFAULT_STEP_PRESET,
    FeedRate,
    RunFigures,
    parse_step_time,
)
from perfsuite.measure.machine import MachineFingerprint
from perfsuite.measure.stats import PairedGain, median_interval
from perfsuite.measure.timing import Measurement, measurement_from_times
from perfsuite.measure.utilisation import GpuStats, GpuTimeline, gpu_stats
from perfsuite.records import Record, RecordError, migrate, migration

SCHEMA_VERSION = 8
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
MATERIAL_GAIN = 1.05  # a change measured on the pipeline is 'apply it' only when its gain's interval lies
# at or above this: a smaller gain is within what a run drifts by, not worth a change to the user's code

# Class boundaries: a figure is decided when its interval holds none of its verdict's boundaries.
LOADER_BOUNDARIES = (1 / MATERIAL_SPEEDUP, MATERIAL_SPEEDUP)
CACHE_BOUNDARIES = (MATERIAL_SPEEDUP,)  # the cache is recommended when >= 1.2x faster; below, no change
STEP_BOUNDARIES = (1 / MATERIAL_STEP_SPEEDUP, MATERIAL_STEP_SPEEDUP)
INPUT_BOUND_BOUNDARIES = (0.05, 0.20)  # stats.MODERATELY_INPUT_BOUND, stats.HIGHLY_INPUT_BOUND (TF's profiler)
VARIATION_BOUNDARIES = (UNSTABLE_VARIATION,)
SWEEP_BOUNDARIES = (1 + SWEEP_MIN_GAIN,)

DEFAULT_BUDGET_S = 180.0  # a default run answers in about three minutes: the budget is wall time, not work
MIN_ROUNDS = 3  # fewer rounds: "not enough time to decide"; the range of 3 rounds covers the median at 75 %
MAX_ROUNDS = 30  # rounds a stage's pass stops at even with time left (a figure that sits on a boundary)

# A stage's status.
DECIDED = "decided"
UNDECIDED = "undecided"  # share spent with >= MIN_ROUNDS rounds; an interval still straddles a boundary
TOO_SHORT = "not enough time to decide"
INTERRUPTED = "interrupted"
DONE = "done"  # a stage with nothing to decide (the trace)


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
    class boundaries of the verdict that reads it; straddles: those inside the interval."""

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


@dataclass(frozen=True)
class PipelineFigures(Record):
    """One loader measured alone."""

    pipeline: Pipeline
    loader: Measurement  # its steady batches, rounds joined: per-batch times, variation, cycle
    samples_per_s: RoundsEstimate  # of the per-round samples/s
    variation: RoundsEstimate  # of the per-round standard deviation / mean of the batch times


@dataclass(frozen=True)
class LoaderComparison(Record):
    """Two loaders measured in the same interleaved rounds."""

    a: Pipeline
    b: Pipeline
    ratios: tuple[float, ...]  # a's samples/s over b's, per round
    ratio: RoundsEstimate  # against LOADER_BOUNDARIES (one source) or CACHE_BOUNDARIES (one kind, cache over WAV)


@dataclass(frozen=True)
class StepMode(Record):
    """One mode of the training step on a fixed batch."""

    first_s: float  # the first call (trace, compile)
    first_steady_s: float  # the call after the warm-up, which sizes the rounds
    call_s: tuple[float, ...]  # every timed call of the rounds
    step_s: RoundsEstimate | None  # of the per-round mean seconds per call; None when no round fit
    traces: int | None  # of a tf.function, in all; None in eager mode
    retraces: int | None  # of a tf.function, in the rounds; None in eager mode


@dataclass(frozen=True)
class StepRatio(Record):
    """One mode's speed over another's: seconds per call of the other over its own."""

    rounds: tuple[float, ...]  # per round
    ratio: RoundsEstimate  # against STEP_BOUNDARIES


@dataclass(frozen=True)
class StepFigures(Record):
    """The training step on one fixed batch in every STEP_MODES mode, in interleaved rounds of
    calls_per_round calls per mode."""

    modes: dict[str, StepMode]
    ratios: dict[str, StepRatio]  # per STEP_RATIOS name; empty when no round fit
    calls_per_round: int
    input_bound_mode: str  # the faster compiled mode, used for the input-bound share and the trace

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
    the same rounds. wait: the per-round share of the fed step's time spent fetching its batch (the profiler's
    input time; on a CPU-only machine the share also holds the pipeline's CPU contention, the wait does not)."""

    share: RoundsEstimate  # per-round 1 - t_synthetic / t_real, against INPUT_BOUND_BOUNDARIES
    classification: str  # of the share's median (TF's profiler classes)
    t_real: float  # t_real, t_synthetic: medians of the per-round mean seconds per step
    t_synthetic: float
    real_round_s: tuple[float, ...]
    synthetic_round_s: tuple[float, ...]
    batches: int  # timed steps per side and round, after warmup untimed
    warmup: int
    pipeline: Pipeline | None = None  # None for a --pipeline run's own pipeline (diagnose/pipeline.py)
    wait: RoundsEstimate | None = None  # against INPUT_BOUND_BOUNDARIES; None before schema 8 (pipeline schema 5)


@dataclass(frozen=True)
class SweepPoint(Record):
    """tf_native WAV samples/s at one point of a sweep axis over the rounds: median, range, relative
    spread, per round, and interval. vs_current and ratio (its RoundsEstimate against SWEEP_BOUNDARIES): against
    the current setting in the same rounds; both None for the current point."""

    point: int
    current: bool
    batches: int | None  # steady batches per round; None when not recorded
    samples_per_s: float
    samples_per_s_low: float
    samples_per_s_high: float
    samples_per_s_spread: float
    samples_per_s_rounds: tuple[float, ...]
    interval: RoundsEstimate
    vs_current: PairedGain | None
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
    """GPU utilisation while the input-bound steps ran. stats: its utilisation.GpuStats, timeline:
    the sampled window; reason says why either is missing."""

    available: bool
    reason: str | None = None
    stats: GpuStats | None = None
    timeline: GpuTimeline | None = None


@dataclass(frozen=True)
class FeedFigures(Record):
    """One pipeline feeding an emulated accelerator (perfsuite.measure.emulated). keeps_busy: whether step_s
    is at or above the feed interval (True), below it (False), or inside it (None). round, stats, timeline:
    one round at the step, its utilisation statistics (emulated_stats) and timeline; None with reason."""

    pipeline: str
    feed: FeedRate  # the shortest step the pipeline keeps >= 90 % busy, with its interval
    step_time: str | None  # the step asked for: a preset or seconds
    step_s: float | None  # that step on this data (the median over a round's batches)
    keeps_busy: bool | None
    round: RunFigures | None  # EmulatedRun.figures()
    stats: GpuStats | None
    timeline: GpuTimeline | None
    reason: str | None = None  # why the round at the step is missing


@dataclass(frozen=True)
class StageRecord(Record):
    """One stage as it ran. needs_s: about the seconds it needs on this machine (None when unknown), what a
    "raise --budget" recommendation quotes: for MIN_ROUNDS rounds, or, for a --pipeline stage left
    undecided, to decide (its rounds so far plus plan.more_rounds' estimate)."""

    name: str
    share_s: float  # of the budget, when it started
    spent_s: float
    rounds: int
    status: str  # DECIDED, UNDECIDED, TOO_SHORT, INTERRUPTED or DONE
    plan: str  # in words
    needs_s: float | None


@dataclass(frozen=True)
class DiagnosisFinding(Record):
    """One finding, on its topic (what was looked at), in words, with the figures behind it (evidence)."""

    topic: str
    finding: str
    evidence: dict
    recommendation: str | None  # None when the figures call for no change or do not decide
    interval: RoundsEstimate | None = None  # the figure it rests on; None for counts and tests (such as the cycle)

    def lines(self) -> list[str]:
        """For the terminal: '[topic] finding', then its evidence, interval and recommendation indented."""
        figures = ", ".join(f"{key}={format_figure(value)}" for key, value in self.evidence.items())
        out = [f"[{self.topic}] {self.finding}", f"    evidence: {figures}"]
        if (figure := self.interval) is not None:
            straddles = "; straddles " + ", ".join(f"{b:.4g}" for b in figure.straddles) if figure.straddles else ""
            out.append(f"    interval: {figure.low:.4g}–{figure.high:.4g} (median {figure.median:.4g}), "
                       f"{figure.rounds} round(s), {figure.coverage:.0%} coverage{straddles}")
        if self.recommendation:
            out.append(f"    recommendation: {self.recommendation}")
        return out


def format_figure(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Diagnosis(Record):
    """Everything one diagnosis measured and concluded. The measured parts are empty (or None) until their
    stage has ended."""

    dataset: str
    settings: DiagnoseSettings
    fingerprint: MachineFingerprint  # the machine's
    complete: bool  # False while stages are missing (an interrupted run's checkpoint)
    elapsed_s: float
    stages: tuple[StageRecord, ...]  # those that ran, in order
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
    trace: str | None  # the profiler trace directory, if one was written
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


def _migrate_parts(data: Any, **parts: Callable[[Any], Any]) -> Any:
    """data (a JSON object) with each named part migrated: a list item by item, an object whole. Anything
    missing or mistyped is left for the validator to name."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for key, function in parts.items():
        if isinstance(data.get(key), list):
            data[key] = [function(item) for item in data[key]]
        elif isinstance(data.get(key), dict):
            data[key] = function(data[key])
    return data


@migration(Diagnosis, 5, 6)
def migrate_5_to_6(data: dict) -> dict:
    """Schema 6 holds each feed rate as its record (FeedRate's fields), not its flat feed_* figures, and
    each utilisation timeline as its record (without the derived 'source' schema 5 wrote beside them)."""
    return _migrate_parts(data, gpu=_timeline_5_to_6, feed=feed_figures_5_to_6)


def _timeline_5_to_6(figures: Any) -> Any:
    if not (isinstance(figures, dict) and isinstance(figures.get("timeline"), dict)):
        return figures
    return {**figures, "timeline": {key: value for key, value in figures["timeline"].items() if key != "source"}}


# FeedRate's fields under their flat schema-5 names; the rest of those keys were derived from them.
_FEED_FIELDS_5 = {"target": "feed_target", "step_s": "feed_step_s", "step_low_s": "feed_step_low_s",
                  "step_high_s": "feed_step_high_s", "answers": "feed_answers_s",
                  "free_running_batch_s": "feed_free_running_batch_s",
                  "audio_s_per_batch": "feed_audio_s_per_batch", "trials": "feed_trials", "note": "feed_note"}


def feed_figures_5_to_6(figures: Any) -> Any:
    """One FeedFigures of diagnose schema 5 (pipeline schema 2): its feed as FeedRate's fields, its
    timeline without 'source'. A value that is not what schema 5 wrote is left for the validator to name."""
    if not (isinstance(figures, dict) and isinstance(figures.get("feed"), dict)):
        return figures
    flat = figures["feed"]
    feed = {name: flat[old] for name, old in _FEED_FIELDS_5.items() if old in flat}
    return _timeline_5_to_6({**figures, "feed": feed})


@migration(Diagnosis, 6, 7)
def migrate_6_to_7(data: dict) -> dict:
    """Schema 7 holds every measured result as its record, not as flat figures read back by key: a
    loader's timing.Measurement, a sweep point's stats.PairedGain, the utilisation statistics as
    utilisation.GpuStats. The fingerprint and an emulated round's figures keep their shape."""
    return _migrate_parts(data, pipelines=_pipeline_6_to_7, gpu=gpu_stats_6_to_7, feed=gpu_stats_6_to_7,
                          sweep=lambda axis: _migrate_parts(axis, points=_point_6_to_7))


# Schema 8 adds each input-bound figure's wait share: a file before it has none (None), so nothing changes.
migration(Diagnosis, 7, 8)(lambda data: data)


def _pipeline_6_to_7(figures: Any) -> Any:
    """A loader's flat Measurement figures (seconds) as the Measurement, rebuilt by the code that measured
    it from the stored batch times: the summary and the cycle follow from them. Schema 6 kept the
    samples of the whole window only; they are spread evenly over its batches."""
    if not (isinstance(figures, dict) and isinstance(figures.get("loader"), dict)):
        return figures
    flat = figures["loader"]
    try:
        batches, samples = len(flat["batch_s"]), flat["samples"]
        each, extra = divmod(samples, batches)
        loader = measurement_from_times(name=flat["name"], warmup_ns=[round(s * 1e9) for s in flat["warmup_s"]],
                                        batch_ns=[round(s * 1e9) for s in flat["batch_s"]],
                                        batch_samples=[each + (i < extra) for i in range(batches)],
                                        traces=flat["traces"], retraces=flat["retraces"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return figures  # not what schema 6 wrote: the validator names it
    return {**figures, "loader": loader.as_dict()}


# PairedGain's summary (stats.RatioSummary) under its flat schema-6 names.
_SUMMARY_6 = {"median": "ratio_median", "low": "ratio_low", "high": "ratio_high", "spread": "ratio_spread",
              "n": "rounds", "values": "ratios"}


def _point_6_to_7(point: Any) -> Any:
    if not (isinstance(point, dict) and isinstance(point.get("vs_current"), dict)):
        return point
    flat = point["vs_current"]
    gain = {key: value for key, value in flat.items() if key not in _SUMMARY_6.values()}
    gain["ratios"] = flat.get("ratios")
    gain["summary"] = {name: flat[old] for name, old in _SUMMARY_6.items() if old in flat}
    return {**point, "vs_current": gain}


def gpu_stats_6_to_7(figures: Any) -> Any:
    """GpuFigures or FeedFigures of diagnose schema 6 (pipeline schema 3): the flat gpu_* / emulated_*
    statistics as the GpuStats of the stored timeline, computed again as the run computed them (gpu_stats
    with its defaults; the emulated accelerator's are the same function)."""
    if not (isinstance(figures, dict) and isinstance(figures.get("stats"), dict)):
        return figures
    try:
        timeline = GpuTimeline.from_dict(figures.get("timeline"), "schema 6 timeline")
        return {**figures, "stats": gpu_stats(timeline).as_dict()}
    except (RecordError, ValueError):
        return figures  # not what schema 6 wrote: the validator names it
