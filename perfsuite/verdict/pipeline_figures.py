"""The parts of a diagnosis (diagnosis_record.py) that read the pipeline: the target, the step's first
calls, the graph, the throughput, the bottleneck, the fixes and the work (worded: pipeline_findings.py)."""

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
    """What was diagnosed: --pipeline, --step, the --arg values; for the dataset preset, its directory, and
    its loader and step in words."""

    pipeline: str
    step: str | None
    args: dict[str, str]
    dataset: str | None = None


@dataclass(frozen=True)
class StepRun(Record):
    """The user's step: first_s (its first call: trace, compile), first_steady_s (the call after), calls
    (after the first); traces over the run and retraces (after the first call): None unless a tf.function."""

    first_s: float
    first_steady_s: float
    calls: int
    traces: int | None
    retraces: int | None


@dataclass(frozen=True)
class DynamicShape(Record):
    """An element component with open dimensions: its path in element_spec ('' for a single tensor), its shape
    in words, and the open dimensions (None: not even the rank is known)."""

    component: str
    shape: str
    dims: tuple[int, ...] | None


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
    """first_batch_s (start-up) and warmup_s apart, then the rounds (batches_per_round: the last pass's).
    unit: 'samples' (a batch's leading dimension) or 'batches' when it has none. rate: per-round units/s;
    variation: per-round stdev / mean of the batch times; batch_s: every steady batch, rounds joined; cycle:
    batch_s's; restarts: times the dataset ended and a new pass began (a finite dataset, measured as is)."""

    first_batch_s: float
    warmup_s: tuple[float, ...]
    unit: str
    rate: RoundsEstimate | None
    variation: RoundsEstimate | None
    batches_per_round: int
    batch_s: tuple[float, ...]
    cycle: Cycle | None
    restarts: int
    audio_s_per_s: RoundsEstimate | None = None
    padding_efficiency: float | None = None
    padding: PaddingFigures | None = None  # measured by the layout (speech.PaddingFigures)
    round_batches: tuple[int, ...] = ()  # batches of each round (a second pass sizes its rounds anew)


@dataclass(frozen=True)
class StageShare(Record):
    """One stage: its words, the samples/s of the pipeline cut after it, and the share of the time per sample
    it adds (per round: its prefix's seconds per sample minus the previous prefix's, over the last one's)."""

    stage: str
    rate: RoundsEstimate
    share: RoundsEstimate


@dataclass(frozen=True)
class Bottleneck(Record):
    """The stages in order and the one that limits throughput (largest share), decided when its share's
    interval lies above every other's. no_work_rounds: rounds where the pipeline read no slower per sample
    than a dataset doing no work (shares undefined: the stages come from the other rounds)."""

    stages: tuple[StageShare, ...]
    limiting: str | None
    decided: bool
    no_work_rounds: int = 0


@dataclass(frozen=True)
class FixGain(Record):
    """A fix measured: name, words, what was compared (unit: 'samples/s of the pipeline' or 'steps/s of the
    step fed by it'), the per-round after/before ratio; applied False with why when it was not."""

    name: str
    words: str
    applied: bool
    why: str | None = None
    unit: str | None = None
    gain: RoundsEstimate | None = None


@dataclass(frozen=True)
class WorkFigures(Record):
    """The fingerprints (None where unreadable: `unavailable` says why), this machine's peak, and the
    achieved rates and work per audio second (None where the run measured no figure to set them against)."""

    pipeline: WorkFingerprint | None
    step: WorkFingerprint | None
    unavailable: tuple[str, ...] = ()
    peak: PeakRate | None = None
    pipeline_float_ops_per_s: float | None = None
    pipeline_float_ops_per_audio_s: float | None = None
    step_float_ops_per_s: float | None = None
