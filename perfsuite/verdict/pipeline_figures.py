"""The parts of a diagnosis that read the pipeline (their findings are worded in pipeline_findings.py)."""

from __future__ import annotations

from dataclasses import dataclass

from perfsuite.measure.batch_spec import leaves
from perfsuite.measure.peak import PeakRate
from perfsuite.measure.speech import PaddingFigures
from perfsuite.measure.stats import Cycle
from perfsuite.measure.work import WorkFingerprint
from perfsuite.records import Record
from perfsuite.verdict.diagnosis_figures import RoundsEstimate
from perfsuite.workload.pipeline_model import PythonOp
from perfsuite.workload.pipeline_model import Stage as GraphStage


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
