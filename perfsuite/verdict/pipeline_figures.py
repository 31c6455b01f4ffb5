"""What a --pipeline diagnosis holds (`perfsuite diagnose --pipeline`, tools/diagnose/pipeline.py), as
diagnosis_figures.py is for the dataset kind: its target and settings, every figure as a record, and the versioned
JSON schema with its migrations. The wording of its findings is in verdict/pipeline_findings.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from perfsuite.measure.batch_spec import BatchLayout, BatchSpec, leaves
from perfsuite.measure.emulated import DEFAULT_STEP_PRESET
from perfsuite.measure.machine import MachineFingerprint
from perfsuite.measure.peak import PeakRate
from perfsuite.measure.speech import PaddingFigures
from perfsuite.measure.stats import Cycle
from perfsuite.measure.work import WorkFingerprint
from perfsuite.records import Record, migrate, migration
from perfsuite.verdict.capacity import CapacityFigures
from perfsuite.verdict.diagnosis_figures import (
    DEFAULT_BUDGET_S,
    DiagnosisFinding,
    FeedFigures,
    InputBoundFigures,
    RoundsEstimate,
    StageRecord,
    check_step_time,
    feed_figures_5_to_6,
    gpu_stats_6_to_7,
    without_kind,
)
from perfsuite.workload.pipeline_model import PythonOp
from perfsuite.workload.pipeline_model import Stage as GraphStage

PIPELINE_SCHEMA_VERSION = 7

# ------------------------------------------------------------------------------------ the diagnosis


@dataclass(frozen=True)
class Target(Record):
    """What was diagnosed: the --pipeline and --step specs and the --arg values."""

    pipeline: str
    step: str | None
    args: dict[str, str]


@dataclass(frozen=True)
class PipelineSettings(Record):
    """budget_s: the whole run, start-up included. warmup: batches (and step calls per side of an
    input-bound round) taken untimed after the first one."""

    budget_s: float = DEFAULT_BUDGET_S
    warmup: int = 2
    frame_s: float | None = None  # seconds of audio per frame (--frame-hop-s); None: perfsuite's mel definition
    step_time: str | None = DEFAULT_STEP_PRESET  # the emulated GPU step (diagnose.DiagnoseSettings.step_time)
    batch_spec: BatchSpec = BatchSpec()  # --batch-spec: the audio and its lengths (batch_spec.find_layout)
    cores: int | None = None  # --cores: the cores of the machine the user trains on (the capacity model's K)

    def __post_init__(self):
        if not (isinstance(self.budget_s, int | float) and self.budget_s > 0):
            raise ValueError(f"budget_s: expected a number of seconds > 0, found {self.budget_s!r}")
        if not isinstance(self.warmup, int) or self.warmup < 1:
            raise ValueError(f"warmup: expected an integer >= 1, found {self.warmup!r}")
        if self.frame_s is not None and not (isinstance(self.frame_s, int | float) and self.frame_s > 0):
            raise ValueError(f"frame_s: expected seconds per frame > 0, found {self.frame_s!r}")
        check_step_time(self.step_time)
        if self.cores is not None and (not isinstance(self.cores, int) or isinstance(self.cores, bool)
                                       or self.cores < 1):
            raise ValueError(f"cores: expected an integer >= 1, found {self.cores!r}")


@dataclass(frozen=True)
class StepRun(Record):
    """The user's step: first_s (its first call on the first batch: trace, compile), first_steady_s (the
    call after), calls (made after the first), and, for a tf.function, traces over the run and retraces
    (traces after the first call). None: the step is not a tf.function, so its traces cannot be counted."""

    first_s: float
    first_steady_s: float
    calls: int
    traces: int | None
    retraces: int | None


@dataclass(frozen=True)
class PipelineDiagnosis(Record):
    """Everything one --pipeline diagnosis inspected, measured and concluded; complete and stages as in
    diagnose.Diagnosis (an interrupted run's checkpoint has complete=False)."""

    target: Target
    settings: PipelineSettings
    fingerprint: MachineFingerprint
    complete: bool
    elapsed_s: float
    stages: tuple[StageRecord, ...]
    graph: GraphFindings
    throughput: Throughput | None
    step: StepRun | None
    input_bound: InputBoundFigures | None
    feed: FeedFigures | None
    verdicts: tuple[DiagnosisFinding, ...]
    layout: BatchLayout | None = None  # which component is the audio and its lengths, by which rule
    startup_s: float | None = None  # importing, building and the first batches, before any stage (kept apart)
    bottleneck: Bottleneck | None = None  # the stage that limits throughput (attribution.BottleneckRounds)
    fixes: tuple[FixGain, ...] = ()  # each fix perfsuite could apply, measured before and after
    work: WorkFigures | None = None  # the work fingerprints and the achieved float-op rates (diagnose/work.py)
    capacity: CapacityFigures | None = None  # stage costs, cores needed, the two-core check (verdict/capacity.py)

    SCHEMA_VERSION: ClassVar[int] = PIPELINE_SCHEMA_VERSION

    def as_dict(self) -> dict:
        return {"schema_version": PIPELINE_SCHEMA_VERSION, "kind": "pipeline", **super().as_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: str = "diagnosis") -> PipelineDiagnosis:
        """Read back what as_dict() wrote; RecordError names a wrong schema_version, kind or field."""
        return super().from_dict(without_kind(migrate(cls, data, where), "pipeline", where), where)


@migration(PipelineDiagnosis, 2, 3)
def migrate_2_to_3(data: dict) -> dict:
    """Schema 3 holds the feed rate as its record (diagnose's schema 6 change)."""
    return {**data, "feed": feed_figures_5_to_6(data["feed"])} if "feed" in data else data


@migration(PipelineDiagnosis, 3, 4)
def migrate_3_to_4(data: dict) -> dict:
    """Schema 4 holds the feed round's utilisation statistics as their GpuStats (diagnose's schema 7
    change). The throughput's cycle (stats.Cycle's fields) and the fingerprint keep their shape."""
    return {**data, "feed": gpu_stats_6_to_7(data["feed"])} if "feed" in data else data


def fields_added(data: dict) -> dict:
    """Schemas 5 (the input-bound figure's wait share, diagnose's schema 8 change) and 6 (the start-up's
    seconds, the bottleneck, the measured fixes, the work) only add fields; their defaults say 'not measured'."""
    return data


migration(PipelineDiagnosis, 4, 5)(fields_added)
migration(PipelineDiagnosis, 5, 6)(fields_added)


@migration(PipelineDiagnosis, 6, 7)
def migrate_6_to_7(data: dict) -> dict:
    """Schema 7 holds the capacity section (verdict/capacity.py): null in a file written before it was measured.
    Its settings' --cores is left out, which reads as its default (none given)."""
    return {**data, "capacity": data.get("capacity")}

# ---------------------------------------------------------------------------------------- its parts


@dataclass(frozen=True)
class DynamicShape(Record):
    """An element component whose static shape leaves dimensions open: its path in element_spec ('' for
    a single tensor), its shape in words, and the open dimensions (None: not even the rank is known)."""

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
        shape = getattr(spec, "shape", None)
        if shape is not None and shape.rank is None:
            out.append(DynamicShape(component=path, shape="<unknown rank>", dims=None))
        elif shape is not None and None in shape.as_list():
            dims = tuple(i for i, dim in enumerate(shape.as_list()) if dim is None)
            out.append(DynamicShape(component=path, shape=str(tuple(shape.as_list())), dims=dims))
    return tuple(out)


@dataclass(frozen=True)
class Throughput(Record):
    """first_batch_s (start-up) and warmup_s apart, then the rounds (batches_per_round: the last pass's;
    round_batches: each round's). unit: 'samples' (the leading dimension of a batch) or 'batches' when a
    batch has none. rate: per-round units/s; variation: per-round standard deviation / mean of the batch
    times; batch_s: every steady batch, rounds joined; cycle: the stats.Cycle of batch_s; restarts: times
    the dataset ended and a new pass began (a finite dataset, measured as it is)."""

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
    """One stage of the pipeline: its words, the rate of the pipeline cut after it (samples/s) and the
    share of the whole pipeline's time per sample it adds (per round: its prefix's seconds per sample minus
    the previous prefix's, over the last prefix's)."""

    stage: str
    rate: RoundsEstimate
    share: RoundsEstimate


@dataclass(frozen=True)
class Bottleneck(Record):
    """The stages in order and the one that limits throughput (the largest share), decided when its share's
    interval lies above every other stage's. no_work_rounds: rounds in which the whole pipeline read no slower
    per sample than a dataset that does no work; their shares are undefined, so the stages come from the rest."""

    stages: tuple[StageShare, ...]
    limiting: str | None
    decided: bool
    no_work_rounds: int = 0


@dataclass(frozen=True)
class FixGain(Record):
    """A fix measured: its name and words, what was compared (units: 'samples/s of the pipeline' or 'steps/s
    of the step fed by it'), and the per-round after/before ratio; applied False with why when it was not."""

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
