"""The parts of a diagnosis (the record: diagnosis_record.py): settings, what was diagnosed, the figures, stages,
findings and thresholds (why: docs/diagnose.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfsuite.measure.batch_spec import BatchSpec, leaves
from perfsuite.measure.emulated import DEFAULT_STEP_PRESET, FeedRate, RunFigures, parse_step_time  # no TF
from perfsuite.measure.peak import PeakRate
from perfsuite.measure.speech import PaddingFigures
from perfsuite.measure.stats import Cycle, PairedGain, median_interval
from perfsuite.measure.utilisation import GpuStats, GpuTimeline
from perfsuite.measure.work import WorkFingerprint
from perfsuite.records import Record
from perfsuite.workload.pipeline_model import PythonOp, read_pipeline
from perfsuite.workload.pipeline_model import Stage as GraphStage

SWEEP_AXES = ("workers", "batch_size")
# The dataset preset's alternatives to its loader (tf_native over the WAVs) and to its step in graph mode, measured
# as fixes are (tools/diagnose/preset.py), with what each changes in words.
ALTERNATIVE_LOADERS = {
    ("numpy_function", "wav"): "read the WAVs through tf.numpy_function (librosa-style) instead of TF ops",
    ("tf_native", "cache"): "train from the .npy cache (perfsuite.data.corpus.build_cache) instead of WAVs",
    ("numpy_function", "cache"): "train from the .npy cache through tf.numpy_function instead of WAVs"}
ALTERNATIVE_MODES = {"xla": "compile the step with XLA (tf.function(jit_compile=True)) and static input shapes",
                     "eager": "run the step eagerly (no tf.function)"}

# Thresholds of the verdicts (docs/diagnose.md says why these values).
UNSTABLE_VARIATION = 0.10  # per-batch stdev >= 10 % of the mean (pyperf's rule)
SWEEP_MIN_GAIN = 0.10  # a sweep point must be faster by a median >= 10 % ...
SWEEP_MIN_WIN_SHARE = 0.8  # ... in >= 80 % of the rounds ...
SWEEP_ALPHA = 0.05  # ... with a one-sided paired t-test p < 0.05 (stats.paired_gain)
GPU_IDLE_MEDIAN_PCT = 50.0
MATERIAL_GAIN = 1.05  # a change measured on the pipeline is 'apply it' only when its gain's interval lies
# at or above this: a smaller gain is within what a run drifts by, not worth a change to the user's code

# Class boundaries: a figure is decided when its interval holds none of its verdict's boundaries.
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


@dataclass(frozen=True)
class RoundsEstimate(Record):
    """A figure over rounds: the median of its per-round values and its interval (stats.median_interval)."""

    median: float
    low: float
    high: float
    coverage: float
    rounds: int
    boundaries: tuple[float, ...]  # the class boundaries of the verdict that reads it
    straddles: tuple[float, ...]  # those inside the interval

    @property
    def decided(self) -> bool:
        return self.rounds >= MIN_ROUNDS and not self.straddles


def estimate(values, boundaries: tuple[float, ...] = ()) -> RoundsEstimate:
    """The RoundsEstimate of per-round values (at least one); boundary b is straddled if low < b <= high."""
    interval = median_interval([float(v) for v in values])
    straddles = tuple(b for b in boundaries if interval.low < b <= interval.high)
    return RoundsEstimate(median=interval.median, low=interval.low, high=interval.high, coverage=interval.coverage,
                          rounds=interval.n, boundaries=tuple(boundaries), straddles=straddles)


def interval_cell(figure: RoundsEstimate | None, fmt=lambda v: f"{v:.3g}") -> str:
    """'12% (3%–25%, 4 rounds)' with ', straddles 5%' when it does; '-' when not measured."""
    if figure is None:
        return "-"
    cell = f"{fmt(figure.median)} ({fmt(figure.low)}–{fmt(figure.high)}, {figure.rounds} rounds"
    if figure.straddles:
        cell += ", straddles " + " and ".join(fmt(b) for b in figure.straddles)
    return cell + ")"


@dataclass(frozen=True)
class DiagnoseSettings(Record):
    """What a diagnosis measures and how long it may take; from batch_size on, for the dataset preset only:
    its loaders, step model, sweep (its axes always hold the current setting) and profiler trace."""

    budget_s: float = DEFAULT_BUDGET_S  # the whole run, start-up included
    warmup: int = 2  # batches (and step calls per side of an input-bound round) untimed after the first
    step_time: str | None = DEFAULT_STEP_PRESET  # the emulated GPU step: a STEP_PRESETS name or seconds
    frame_s: float | None = None  # seconds of audio per frame (--frame-hop-s); None: perfsuite's mel definition
    batch_spec: BatchSpec = BatchSpec()  # --batch-spec: the audio and its lengths (batch_spec.find_layout)
    cores: int | None = None  # --cores: the cores of the machine the user trains on (the capacity model's K)
    batch_size: int = 16
    workers: int = 2  # -1: AUTOTUNE
    model: str = "default"
    batches: int = 16
    sweep_workers: tuple[int, ...] = (1, 2, 4)
    sweep_batch_sizes: tuple[int, ...] = ()  # empty: half, the same and twice batch_size
    trace_steps: int = 3

    def __post_init__(self):
        for name in ("batch_size", "batches", "warmup", "trace_steps", "cores"):
            value = getattr(self, name)
            if name == "cores" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, found {value!r}")
        if self.workers != -1 and self.workers < 1:
            raise ValueError(f"workers: expected an integer >= 1 or -1 (AUTOTUNE), found {self.workers!r}")
        if not (isinstance(self.budget_s, int | float) and self.budget_s > 0):
            raise ValueError(f"budget_s: expected a number of seconds > 0, found {self.budget_s!r}")
        if self.frame_s is not None and not (isinstance(self.frame_s, int | float) and self.frame_s > 0):
            raise ValueError(f"frame_s: expected seconds per frame > 0, found {self.frame_s!r}")
        if self.step_time is not None:
            parse_step_time(self.step_time)  # ValueError unless a STEP_PRESETS name or seconds > 0
        object.__setattr__(self, "sweep_workers", tuple(self.sweep_workers))
        sizes = self.sweep_batch_sizes or {max(1, self.batch_size // 2), self.batch_size, self.batch_size * 2}
        object.__setattr__(self, "sweep_batch_sizes", tuple(sorted(sizes)))


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
class InputBoundFigures(Record):
    """The compiled step fed by one pipeline vs by its synthetic twin (a cached batch repeated), same rounds.
    wait: the per-round share of the fed step's time spent fetching its batch (the profiler's input time; on
    a CPU-only machine the share also holds the pipeline's CPU contention, the wait does not)."""

    share: RoundsEstimate  # per-round 1 - t_synthetic / t_real, against INPUT_BOUND_BOUNDARIES
    classification: str  # of the share's median (TF's profiler classes)
    t_real: float  # t_real, t_synthetic: medians of the per-round mean seconds per step
    t_synthetic: float
    real_round_s: tuple[float, ...]
    synthetic_round_s: tuple[float, ...]
    batches: int  # timed steps per side and round, after warmup untimed
    warmup: int
    wait: RoundsEstimate | None = None  # against INPUT_BOUND_BOUNDARIES; None before schema 8 (pipeline schema 5)


@dataclass(frozen=True)
class SweepPoint(Record):
    """tf_native WAV samples/s at one point of a sweep axis over the rounds."""

    point: int
    current: bool
    batches: int | None  # steady batches per round; None when not recorded
    samples_per_s: float
    samples_per_s_low: float
    samples_per_s_high: float
    samples_per_s_spread: float
    samples_per_s_rounds: tuple[float, ...]
    interval: RoundsEstimate
    vs_current: PairedGain | None  # against the current setting in the same rounds; None for the current one
    ratio: RoundsEstimate | None  # vs_current's ratio against SWEEP_BOUNDARIES; None for the current one


@dataclass(frozen=True)
class SweepAxis(Record):
    """One sweep axis (SWEEP_AXES): its points in the same interleaved rounds, thresholds, rounds' order."""

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
    """GPU utilisation while the input-bound steps ran: stats, the sampled timeline, or why not (reason)."""

    available: bool
    reason: str | None = None
    stats: GpuStats | None = None
    timeline: GpuTimeline | None = None


@dataclass(frozen=True)
class FeedFigures(Record):
    """One pipeline feeding an emulated accelerator (measure.emulated)."""

    pipeline: str
    feed: FeedRate  # the shortest step the pipeline keeps >= 90 % busy, with its interval
    step_time: str | None  # the step asked for: a preset or seconds
    step_s: float | None  # that step on this data (the median over a round's batches)
    keeps_busy: bool | None  # step_s at or above the feed interval (True), below it (False), inside it (None)
    round: RunFigures | None  # one round at the step (EmulatedRun.figures())
    stats: GpuStats | None  # its utilisation statistics (emulated_stats)
    timeline: GpuTimeline | None
    reason: str | None = None  # why the round at the step is missing


@dataclass(frozen=True)
class StageRecord(Record):
    """One stage as it ran. needs_s: about the seconds it needs here (None: unknown), for "raise --budget":
    for MIN_ROUNDS rounds or, for an undecided --pipeline stage, its rounds and plan.more_rounds' estimate."""

    name: str
    share_s: float  # of the budget, when it started
    spent_s: float
    rounds: int
    status: str  # DECIDED, UNDECIDED, TOO_SHORT, INTERRUPTED or DONE
    plan: str  # in words
    needs_s: float | None


@dataclass(frozen=True)
class DiagnosisFinding(Record):
    """One finding on its topic (what was looked at), in words, with the figures behind it (evidence)."""

    topic: str
    finding: str
    evidence: dict
    recommendation: str | None  # None when the figures call for no change or do not decide
    interval: RoundsEstimate | None = None  # the figure it rests on; None for counts and tests (such as the cycle)

    def evidence_words(self) -> str:
        """The figures behind it: 'key=value, ...'."""
        return ", ".join(f"{key}={format_figure(value)}" for key, value in self.evidence.items())

    def lines(self) -> list[str]:
        """For the terminal: '[topic] finding', then its evidence, interval and recommendation indented."""
        out = [f"[{self.topic}] {self.finding}", f"    evidence: {self.evidence_words()}"]
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
class Target(Record):
    """What was diagnosed: --pipeline, --step and the --arg values (the preset's loader and step in words)."""

    pipeline: str
    step: str | None
    args: dict[str, str]
    dataset: str | None = None  # the dataset preset's directory


@dataclass(frozen=True)
class StepRun(Record):
    """The user's step: its first calls, the calls made, and (None unless a tf.function) its traces."""

    first_s: float  # its first call, on the first batch: trace, compile
    first_steady_s: float  # the call after
    calls: int  # made after the first
    traces: int | None  # over the run
    retraces: int | None  # traces after the first call


@dataclass(frozen=True)
class DynamicShape(Record):
    """An element component whose static shape leaves dimensions open."""

    component: str  # its path in element_spec ('' for a single tensor)
    shape: str  # in words
    dims: tuple[int, ...] | None  # the open dimensions; None: not even the rank is known


@dataclass(frozen=True)
class GraphFindings(Record):
    """What the dataset's graph shows, its stages from the source to the output (along first inputs)."""

    transformations: tuple[str, ...]  # the stages' dataset op types
    python_ops: tuple[PythonOp, ...]
    ends_with_prefetch: bool  # the last real stage prefetches
    inject_prefetch: bool  # tf.data adds a prefetch at run time after a synchronous last stage (default on)
    dynamic_shapes: tuple[DynamicShape, ...]  # element components with open dimensions: a step may retrace
    element_spec: str
    stages: tuple[GraphStage, ...] = ()
    last_stage: str | None = None  # the op of the last real stage (wrappers and pass-through stages skipped)
    after_prefetch_to_device: tuple[str, ...] = ()  # real stages after it (TensorFlow requires it last)
    read_from: str = "serialized graph"  # or the walk that read a dataset TensorFlow would not serialize
    sequential_reads: tuple[str, ...] = ()  # interleaves / flat_maps reading files one at a time, in words
    caches_after_endless_repeat: tuple[str, ...] = ()  # cache stages after an endless repeat, in words
    buckets: bool = False  # the pipeline already batches by length (group_by_window)

    @classmethod
    def of(cls, dataset) -> GraphFindings:
        """The findings of a tf.data.Dataset or of a Pipeline already read, asked of its model (the rules:
        docs/diagnose.md, "The graph read as it runs")."""
        pipeline = read_pipeline(dataset)
        model, last = pipeline.model, pipeline.model.last_real_stage()
        stages = model.chain()
        copies = [i for i, s in enumerate(stages) if s.family == "copy"]  # prefetch_to_device: TF requires it last
        after = [s for s in stages[copies[-1] + 1:] if s.kind != "wrapper"] if copies else []
        after = after[1:] if after and after[0].family == "prefetch" else after  # its own prefetch, its second half
        return cls(transformations=tuple(s.op for s in stages), python_ops=model.python_ops,
                   ends_with_prefetch=last is not None and last.family == "prefetch",
                   inject_prefetch=model.inject_prefetch, dynamic_shapes=dynamic_shapes(pipeline.dataset.element_spec),
                   element_spec=model.element_spec, stages=stages, last_stage=None if last is None else last.op,
                   after_prefetch_to_device=tuple(s.method for s in after), read_from=model.read_from,
                   sequential_reads=tuple(f"{stage.words()} {stage.node} (reads with {', '.join(reads)})"
                                          for stage, reads in model.sequential_reads()),
                   caches_after_endless_repeat=tuple(f"{s.words()} {s.node}"
                                                     for s in model.caches_after_endless_repeat()),
                   buckets=model.buckets())

    def chain_words(self) -> str:
        """The stages as they run, wrappers named apart: 'range -> map (AUTOTUNE parallel) -> ...'."""
        real = [stage.words() for stage in self.stages if stage.kind != "wrapper"]
        wrappers = sorted({stage.method for stage in self.stages if stage.kind == "wrapper"})
        return " -> ".join(real) + (f" (wrappers skipped: {', '.join(wrappers)})" if wrappers else "")

    def sequential_maps(self) -> tuple[GraphStage, ...]:
        """The model's sequential maps (Stage.sequential_map), on the main line as the record holds it."""
        return tuple(s for s in self.stages if s.sequential_map())

    def fixed_padding(self) -> tuple[GraphStage, ...]:
        """padded_batch stages that pad a component of rank >= 2 to a fixed length on its first axis."""
        return tuple(s for s in self.stages if s.padded_shapes
                     and any(len(shape) >= 2 and shape[0] > 0 for shape in s.padded_shapes))


def dynamic_shapes(element_spec) -> tuple[DynamicShape, ...]:
    """Components of element_spec whose static shape has open dimensions (or an unknown rank)."""
    out = []
    for path, spec in leaves(element_spec):
        if (shape := getattr(spec, "shape", None)) is not None and shape.rank is None:
            out.append(DynamicShape(component=path, shape="<unknown rank>", dims=None))
        elif shape is not None and None in (dims := shape.as_list()):
            out.append(DynamicShape(component=path, shape=str(tuple(dims)),
                                    dims=tuple(i for i, dim in enumerate(dims) if dim is None)))
    return tuple(out)


@dataclass(frozen=True)
class Throughput(Record):
    """The pipeline's throughput: the start-up and warm-up apart, then the rounds."""

    first_batch_s: float  # start-up
    warmup_s: tuple[float, ...]
    unit: str  # 'samples' (a batch's leading dimension) or 'batches' when a batch has none
    rate: RoundsEstimate | None  # per-round units/s
    variation: RoundsEstimate | None  # per-round standard deviation / mean of the batch times
    batches_per_round: int  # the last pass's
    batch_s: tuple[float, ...]  # every steady batch, rounds joined
    cycle: Cycle | None  # of batch_s
    restarts: int  # times the dataset ended and a new pass began (a finite dataset, measured as it is)
    audio_s_per_s: RoundsEstimate | None = None
    padding_efficiency: float | None = None
    padding: PaddingFigures | None = None  # measured by the layout (speech.PaddingFigures)
    round_batches: tuple[int, ...] = ()  # batches of each round (a second pass sizes its rounds anew)

    @property
    def samples_per_s(self) -> float | None:
        """The steady rate's median where it counts samples, else None."""
        return self.rate.median if self.rate is not None and self.unit == "samples" else None


@dataclass(frozen=True)
class StageShare(Record):
    """One stage of the pipeline, in words."""

    stage: str
    rate: RoundsEstimate  # samples/s of the pipeline cut after it
    share: RoundsEstimate  # per round: (its prefix's s/sample - the previous prefix's) / the last prefix's


@dataclass(frozen=True)
class Bottleneck(Record):
    """The stages in order and the one that limits throughput (the largest share)."""

    stages: tuple[StageShare, ...]
    limiting: str | None
    decided: bool  # the limiting stage's share's interval lies above every other stage's
    no_work_rounds: int = 0  # read no slower per sample than a no-work dataset: left out (shares undefined)


@dataclass(frozen=True)
class FixGain(Record):
    """A fix measured: its name and words, and what it changed; applied False with why when it was not."""

    name: str
    words: str
    applied: bool
    why: str | None = None
    unit: str | None = None  # compared: 'samples/s of the pipeline' or 'steps/s of the step fed by it'
    gain: RoundsEstimate | None = None  # the per-round after/before ratio


@dataclass(frozen=True)
class WorkFigures(Record):
    """The fingerprints, this machine's peak, the achieved rates and work per audio s (None: no figure)."""

    pipeline: WorkFingerprint | None  # None where unreadable: unavailable says why
    step: WorkFingerprint | None
    unavailable: tuple[str, ...] = ()
    peak: PeakRate | None = None
    pipeline_float_ops_per_s: float | None = None
    pipeline_float_ops_per_audio_s: float | None = None
    step_float_ops_per_s: float | None = None
