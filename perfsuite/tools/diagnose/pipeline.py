"""`perfsuite diagnose --pipeline MODULE:FUNCTION`: measure a user's own tf.data pipeline as it is, within
a time budget, and inspect its graph for what can cost training time.

targets.py imports the user's factory (and step) and reads the graph; diagnose_pipeline() measures, in
budgeted stages after the start-up and the step's first calls: steady throughput (throughput.py), the
input-bound share (given a step), the bottleneck (attribution.py), the fixes (fixes.py, padding.py) and the
feed rate; the time left goes to the undecided ones (plan.StageLog.resume). Verdicts come only from
measured figures: the graph says where to look, the figures whether it matters. A target perfsuite cannot
use raises TargetError (a step that fails when called: StepError), one line naming what was looked up and what
was found.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from perfsuite.measure.batch_spec import BatchLayout, BatchSpec, find_layout
from perfsuite.measure.emulated import DEFAULT_STEP_PRESET
from perfsuite.measure.input_bound import InputBound, InputBoundRounds
from perfsuite.measure.machine import MachineFingerprint
from perfsuite.measure.speech import canonical_batch
from perfsuite.measure.step_model import StepModel
from perfsuite.records import Record, migrate, migration
from perfsuite.tools.diagnose import rewrite
from perfsuite.tools.diagnose.attribution import Bottleneck, BottleneckRounds, bottleneck_verdicts
from perfsuite.tools.diagnose.fixes import FixGain, FixRounds, RewriteComparison, fix_verdicts
from perfsuite.tools.diagnose.graph import graph_findings
from perfsuite.tools.diagnose.padding import PaddingComparison
from perfsuite.tools.diagnose.plan import (
    MAX_STEP_CALLS,
    MIN_STEP_BATCHES,
    Budget,
    Event,
    Progress,
    Resumable,
    Stage,
    StageLog,
    calls_that_fit,
    more_rounds_for,
    no_progress,
    status_from,
)
from perfsuite.tools.diagnose.stages import feed_figures, wait_estimate
from perfsuite.tools.diagnose.streams import Stream, buffered_elements, steady_stream, timed_next
from perfsuite.tools.diagnose.targets import (
    GraphFindings,
    PythonOp,
    inspect_graph,
    load_callable,
    load_step,
    make_dataset,
)
from perfsuite.tools.diagnose.throughput import Throughput, ThroughputRounds, throughput_verdicts
from perfsuite.tools.diagnose.work import WorkFigures, read_work, with_rates, work_verdicts
from perfsuite.verdict.diagnosis import (
    deferred_to_measured,
    estimate_evidence,
    feed_verdict,
    feed_words,
    frame_assumed,
    lost_words,
    percent,
    ranked_changes,
    retrace_recommendation,
    span_words,
    stage_verdicts,
    stand_in_step,
    wait_words,
    why_undecided,
)
from perfsuite.verdict.diagnosis_figures import (
    DEFAULT_BUDGET_S,
    INPUT_BOUND_BOUNDARIES,
    TOO_SHORT,
    DiagnosisFinding,
    FeedFigures,
    InputBoundFigures,
    RoundsEstimate,
    StageRecord,
    check_step_time,
    estimate,
    feed_figures_5_to_6,
    gpu_stats_6_to_7,
    without_kind,
)
from perfsuite.verdict.pipeline_findings import layout_finding
from perfsuite.workload.pipeline_model import Pipeline, read_pipeline

PIPELINE_SCHEMA_VERSION = 6
PIPELINE_STAGE_NEEDS = {"throughput": 3.0, "input_bound": 6.0, "bottleneck": 3.0, "fixes": 4.0, "feed": 2.0}
MIN_FEED_S = 0.5  # a feed-rate search needs at least this share
MAX_STEP_CALLS_AGAIN = 16 * MAX_STEP_CALLS  # step calls per side of a second input-bound pass's round, at most


# ----------------------------------------------------------------------------------- the records


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

    def __post_init__(self):
        if not (isinstance(self.budget_s, int | float) and self.budget_s > 0):
            raise ValueError(f"budget_s: expected a number of seconds > 0, found {self.budget_s!r}")
        if not isinstance(self.warmup, int) or self.warmup < 1:
            raise ValueError(f"warmup: expected an integer >= 1, found {self.warmup!r}")
        if self.frame_s is not None and not (isinstance(self.frame_s, int | float) and self.frame_s > 0):
            raise ValueError(f"frame_s: expected seconds per frame > 0, found {self.frame_s!r}")
        check_step_time(self.step_time)


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


@migration(PipelineDiagnosis, 4, 5)
def migrate_4_to_5(data: dict) -> dict:
    """Schema 5 adds the input-bound figure's wait share (diagnose's schema 8 change); before it, None."""
    return data


@migration(PipelineDiagnosis, 5, 6)
def migrate_5_to_6(data: dict) -> dict:
    """Schema 6 adds the start-up's seconds, the bottleneck, the measured fixes and the work; before it, not measured."""
    return data


# ------------------------------------------------------------------------------------------ the run


def diagnose_pipeline(*, target: Target, settings: PipelineSettings, progress: Progress = no_progress,
                      checkpoint: Callable[[PipelineDiagnosis], None] | None = None,
                      clock: Callable[[], float] = time.monotonic) -> PipelineDiagnosis:
    """Import, inspect and measure target within settings.budget_s. checkpoint() is called after the
    start-up and after every stage with what exists (complete=False), and at the end (complete=True).
    TargetError for a target perfsuite cannot use, StepError (named '--step MODULE:FUNCTION') for a step
    that raises or returns no tensor; a KeyboardInterrupt is passed on after the interrupted stage was
    checkpointed."""
    from perfsuite.measure.machine import machine_fingerprint

    stages = ("throughput", "input_bound", "bottleneck", "fixes", "feed") if target.step else (
        "throughput", "bottleneck", "fixes", "feed")
    budget = Budget(settings.budget_s, {name: PIPELINE_STAGE_NEEDS[name] for name in stages}, clock)

    def tell(message: str) -> None:
        progress(Event("startup", "note", message, None, budget.elapsed_s(), budget.left_s()))

    tell(f"importing {target.pipeline}" + (f" and {target.step}" if target.step else ""))
    dataset = make_dataset(load_callable(target.pipeline, "--pipeline"), target.args, target.pipeline)
    step = load_step(target.step, tell) if target.step else None
    pipeline = read_pipeline(dataset)  # the one reading of the pipeline, handed to every stage that asks it
    graph = inspect_graph(pipeline)
    tell(f"graph as it runs: {graph.chain_words()}; {len(graph.python_ops)} Python-function op(s)")
    stream = Stream(dataset, target.pipeline)
    first_batch, first_s, warmup, warmup_s = _start(stream, settings.warmup)
    stream.close()  # its buffers would fill during the step's first calls: every stage reads a fresh one
    startup_s = budget.elapsed_s()
    layout = find_layout(first_batch, replace(settings.batch_spec, frame_s=settings.frame_s), more=warmup)
    tell(f"batches: {layout.words()}")
    tell(f"first batch {first_s:.2f} s, warm-up batches {', '.join(f'{s:.3f}' for s in warmup_s)} s")
    model = StepModel(step, name=f"--step {target.step}") if step is not None else None
    first_step = _first_calls(model, first_batch) if model is not None else None
    if first_step is not None:
        tell(f"the step's first call {first_step.first_s:.2f} s (trace, compile), then {first_step.first_steady_s:.3g} s: "
             "kept apart, the budget left after it is split across the stages")
    read_from = budget.elapsed_s()
    work = read_work(pipeline, step, first_batch, pipeline_name=target.pipeline, step_name=target.step)
    tell(f"work read from the graphs in {budget.elapsed_s() - read_from:.1f} s (kept apart, as the start-up)")
    buffered = buffered_elements(pipeline)
    head = {"target": target, "settings": settings, "fingerprint": machine_fingerprint(), "graph": graph,
            "layout": layout, "startup_s": startup_s}
    run = StageLog(make=lambda **found: _with_verdicts(PipelineDiagnosis(**head, **found, verdicts=())),
                   parts={"throughput": None, "step": first_step, "input_bound": None, "feed": None,
                          "bottleneck": None, "fixes": (), "work": work},
                   budget=budget, progress=progress, checkpoint=checkpoint)
    run.save()
    run.tell_plan(after="the start-up" + (" and the step's first calls" if step is not None else ""))
    throughput = ThroughputRounds(dataset, target.pipeline, first_s, warmup_s, layout=layout,
                                   drain=settings.warmup + buffered)
    bound = _InputBoundRounds(model, first_step, first_batch, dataset, settings, target) if model else None
    with run.stage("throughput") as stage:
        run.parts["throughput"] = throughput.run(stage)
    if bound is not None:
        with run.stage("input_bound") as stage:
            run.parts.update(zip(("input_bound", "step"), bound.run(stage)))
    bottleneck = BottleneckRounds(pipeline, target.pipeline, warmup=settings.warmup)
    with run.stage("bottleneck") as stage:
        run.parts["bottleneck"] = bottleneck.run(stage)
    fixes = FixRounds(lambda stage: _fix_comparisons(stage, pipeline, graph, model, settings, target, layout,
                                                     run.parts["throughput"]))
    passes = {"throughput": Resumable(lambda stage: {"throughput": throughput.run(stage)}, throughput.more_rounds),
              "bottleneck": Resumable(lambda stage: {"bottleneck": bottleneck.run(stage)}, bottleneck.more_rounds),
              "fixes": Resumable(lambda stage: {"fixes": fixes.run(stage)}, fixes.more_rounds)}
    if bound is not None:
        passes["input_bound"] = Resumable(lambda stage: dict(zip(("input_bound", "step"), bound.run(stage))),
                                          bound.more_rounds)
    with run.stage("fixes", held=tuple(n for n in run.undecided() if n in passes)) as stage:
        run.parts["fixes"] = fixes.run(stage)
    with run.stage("feed", held=tuple(n for n in run.undecided() if n in passes)) as stage:
        run.parts["feed"] = _feed_stage(stage, dataset, target, settings, layout, run.parts["throughput"],
                                        drain=settings.warmup + buffered)
    run.resume(passes)  # the time decided stages left goes to those still undecided
    fixes.close()
    run.parts["work"] = _with_rates(work, run.parts["throughput"], run.parts["input_bound"], run.parts["step"])
    final = run.snapshot(complete=True)
    if checkpoint is not None:
        checkpoint(final)
    return final


def _with_rates(work: WorkFigures, throughput: Throughput | None, bound: InputBoundFigures | None,
                step: StepRun | None) -> WorkFigures:
    """The work against the steady samples/s and audio, and the step's steady seconds (fed by the synthetic
    twin where measured, else its second call)."""
    rate = None if throughput is None or throughput.rate is None or throughput.unit != "samples" else throughput.rate
    audio = None if rate is None or throughput.audio_s_per_s is None else throughput.audio_s_per_s.median / rate.median
    step_s = bound.t_synthetic if bound is not None else step.first_steady_s if step is not None else None
    return with_rates(work, audio_s_per_sample=audio, samples_per_s=None if rate is None else rate.median,
                      step_s=step_s)


def _fix_comparisons(stage: Stage, pipeline: Pipeline, graph: GraphFindings, step: StepModel | None,
                     settings: PipelineSettings, target: Target, layout: BatchLayout,
                     measured: Throughput | None) -> tuple[list, list[FixGain]]:
    """The fixes perfsuite can apply to this pipeline (padding first: the step's gain), and those it considered
    and cannot apply, with why."""
    dataset = pipeline.dataset
    try:
        fixes, skipped = rewrite.applicable_fixes(
            pipeline, ends_with_prefetch=graph.ends_with_prefetch, fill_limit_s=stage.left_s() / 4,
            samples_per_s=None if measured is None or measured.rate is None or measured.unit != "samples"
            else measured.rate.median)
    except Exception as error:  # noqa: BLE001 -- a graph perfsuite cannot rewrite: said, not raised
        fixes, skipped = [], [rewrite.NotApplied("all", f"the graph could not be read for rewriting: {error}")]
    comparisons = [RewriteComparison(fix, dataset, target.pipeline, warmup=settings.warmup, step=step)
                   for fix in fixes]
    padding = None if measured is None else measured.padding
    if padding is not None and padding.beyond_longest > 0 and not graph.buckets:
        comparisons.insert(0, PaddingComparison(step, dataset, target.pipeline, layout=layout, padding=padding))
    elif graph.buckets:
        skipped.append(rewrite.NotApplied("bucketing", "the pipeline already buckets by length (group_by_window)"))
    return comparisons, [FixGain(name=s.name, words=s.name, applied=False, why=s.why) for s in skipped]


def _feed_stage(stage: Stage, dataset, target: Target, settings: PipelineSettings, layout: BatchLayout,
                throughput: Throughput | None, *, drain: int) -> FeedFigures | None:
    """The pipeline against an emulated accelerator: its feed rate, then a round at settings.step_time, read
    from a fresh iterator drained of `drain` batches (the warm-up and what its buffers hold; a share spent
    draining searches nothing). Batches of any structure go on as {'mel', 'mel_len'} (speech.canonical_batch,
    the throughput stage's true lengths) where it found real frames, otherwise as they are."""
    if stage.left_s() <= MIN_FEED_S:
        return _no_feed_search(stage, "no time left for a feed-rate search")
    stage.plan = f"a feed-rate search, then a round at the {settings.step_time} step"
    stage.tell("note", stage.plan)
    padding = None if throughput is None else throughput.padding
    stream = steady_stream(dataset.repeat(), target.pipeline, warmup=0, buffered=drain)
    if stage.left_s() <= MIN_FEED_S:  # draining a slow pipeline's buffers can take the whole share
        stream.close()
        return _no_feed_search(stage, f"no time left for a feed-rate search after draining {drain} batches")
    if padding is not None and padding.real_frames > 0:
        batches = (canonical_batch(batch, layout) for batch in stream)
    else:
        batches = stream
        stage.tell("note", "batches handed on as they are: " + ("no audio component" if layout.mel is None else
                                                               "the throughput stage found no real frames"))
    figures = feed_figures(batches, label=target.pipeline, step_time=settings.step_time, share_s=stage.left_s())
    stream.close()
    stage.rounds = 1
    stage.tell("round", feed_words(figures))
    return figures


def _no_feed_search(stage: Stage, why: str) -> None:
    stage.plan = why
    stage.tell("note", why)
    stage.status = TOO_SHORT


def _with_verdicts(diagnosis: PipelineDiagnosis) -> PipelineDiagnosis:
    return replace(diagnosis, verdicts=tuple(pipeline_verdicts(diagnosis)))


def _start(stream: Stream, warmup: int) -> tuple[Any, float, tuple, tuple[float, ...]]:
    """(the first batch, its seconds (start-up), `warmup` more batches, their seconds)."""
    first, first_s = timed_next(stream)
    more = [timed_next(stream) for _ in range(warmup)]
    return first, first_s, tuple(b for b, _ in more), tuple(s for _, s in more)


def _first_calls(step: StepModel, batch) -> StepRun:
    first = step.first_calls(batch)
    return StepRun(first_s=first.first_s, first_steady_s=first.steady_s, calls=1, traces=first.traces,
                   retraces=None if first.traces is None else 0)


class _InputBoundRounds:
    """The step fed by the pipeline vs by the first batch repeated, measured by measure.input_bound's
    InputBoundRounds (the alternating measurement the benchmarks and the fixture use) with diagnose's
    contract: a fresh iterator per side and round (a Stream, made right before it, closed inside it: its
    buffers fill only while its own round runs), the twin first in even rounds, rounds until the share is
    decided or the share of the budget is spent; the step's traces counted over the rounds. A second pass
    adds rounds to the first, its sides' steps sized afresh by the time left."""

    def __init__(self, step: StepModel, first: StepRun, batch, dataset, settings: PipelineSettings,
                 target: Target):
        from perfsuite._tensorflow import tensorflow

        self.step, self.first, self.dataset, self.settings, self.target = step, first, dataset, settings, target
        self.twin = tensorflow().data.Dataset.from_tensors(batch).repeat()
        self.measurement: InputBoundRounds | None = None
        self.retraces_before = step.retraces  # traces since the first calls (the work fingerprint's) left out

    def measured(self) -> InputBound | None:
        """The rounds so far; None before the first."""
        return self.measurement.result() if self.measurement is not None and self.measurement.rounds else None

    def figure(self) -> RoundsEstimate:
        return estimate(self.measured().shares, INPUT_BOUND_BOUNDARIES)

    def decided(self) -> bool:
        return self.measured() is not None and self.figure().decided

    def more_rounds(self) -> float:
        return more_rounds_for(self.figure() if self.measured() is not None else None)

    def run(self, stage: Stage) -> tuple[InputBoundFigures | None, StepRun]:
        warmup, call_s, so_far = self.settings.warmup, self.first.first_steady_s, self.measured()
        if so_far is not None:  # a second pass: its rounds sized by the time left, up to MAX_STEP_CALLS_AGAIN a side
            call_s = statistics.median(so_far.real_round_s + so_far.synthetic_round_s)  # seconds per step, measured
        most = MAX_STEP_CALLS if so_far is None else MAX_STEP_CALLS_AGAIN
        batches = max(MIN_STEP_BATCHES, calls_that_fit(stage.left_s(), 2 * call_s, most=most) - warmup)
        stage.plan = (f"rounds of the synthetic twin and the pipeline, each a fresh iterator, {warmup} untimed + "
                      f"{batches} timed steps of about {call_s:.3g} s (about {2 * (warmup + batches) * call_s:.1f} s "
                      "per round), until the share is decided")
        stage.tell("note", stage.plan)
        if self.measurement is None:
            spec = self.target.pipeline
            self.measurement = InputBoundRounds(step=self.step, dataset=self.dataset, warmup=warmup, batches=batches,
                                                twin=self.twin, twin_first=True,
                                                fresh=lambda dataset: Stream(dataset, spec))
        self.measurement.batches = batches
        stage.rounds_until_decided(lambda index: self.measurement.one_round(), decided=self.decided,
                                   first_estimate_s=2 * (warmup + batches) * call_s)
        stage.status = status_from(self.decided(), self.measurement.rounds)
        return self.figures()

    def figures(self) -> tuple[InputBoundFigures | None, StepRun]:
        from perfsuite.measure import stats

        first, measured = self.first, self.measured()
        calls = 0 if self.measurement is None else self.measurement.calls
        retraces = None if self.retraces_before is None else self.step.retraces - self.retraces_before
        used = replace(first, calls=first.calls + calls,
                       traces=None if first.traces is None else first.traces + retraces, retraces=retraces)
        if measured is None:
            return None, used
        share = self.figure()
        label = stats.classify_input_bound(share.median) if share.decided else "undecided"
        return InputBoundFigures(share=share, classification=label, t_real=measured.t_real,
                                 t_synthetic=measured.t_synthetic, real_round_s=measured.real_round_s,
                                 synthetic_round_s=measured.synthetic_round_s, batches=measured.batches,
                                 warmup=self.settings.warmup,
                                 wait=wait_estimate(measured.wait_round_s, measured.real_round_s)), used


# ------------------------------------------------------------------------------------------ verdicts


def pipeline_verdicts(diagnosis: PipelineDiagnosis) -> list[DiagnosisFinding]:
    """Findings from the measured figures; the graph findings are judged by them (a Python op or a
    missing prefetch is worth changing only when the step is measured to wait for input), and by the changes
    measured here where one went their way. The changes measured on this pipeline come first, ranked by gain
    (verdict.diagnosis.ranked_changes), then the rest. A figure resting on the assumed seconds per frame says
    so first; the feed verdict at a stand-in step is left out where the user gave --step (the real one)."""
    bound, graph = diagnosis.input_bound, diagnosis.graph
    out = stage_verdicts(diagnosis.stages, budget_s=diagnosis.settings.budget_s)
    if diagnosis.layout is not None:
        out.append(layout_finding(diagnosis.layout))
    out += _startup_verdicts(diagnosis)
    if diagnosis.throughput is not None:
        out += throughput_verdicts(diagnosis.throughput)
    out += _input_bound_verdicts(diagnosis)
    out += bottleneck_verdicts(diagnosis.bottleneck)
    out += fix_verdicts(diagnosis.fixes)
    out += [_python_op_verdict(op, bound, diagnosis.target) for op in graph.python_ops]
    out += _prefetch_verdicts(graph, bound, diagnosis.target)
    padding = None if diagnosis.throughput is None else diagnosis.throughput.padding
    out += graph_findings(graph, padding=padding, not_measured=_no_padding_because(diagnosis),
                          waits=_waits(bound), why_not=_no_change_because(bound, diagnosis.target),
                          share=None if bound is None else bound.share)
    out += _shape_verdicts(graph, diagnosis.step, diagnosis.target)
    if diagnosis.feed is not None and not (diagnosis.target.step and stand_in_step(diagnosis.feed)):
        out.append(feed_verdict(diagnosis.feed))
    out += work_verdicts(diagnosis.work)
    changes, rest = ranked_changes(deferred_to_measured([frame_assumed(f, diagnosis.layout) for f in out]))
    return changes + rest


def _waits(bound: InputBoundFigures | None) -> bool | None:
    """True / False when the share is decided input-bound / not; None when not measured or undecided."""
    if bound is None or not bound.share.decided:
        return None
    return bound.classification != "not input-bound"


def _input_bound_verdicts(diagnosis: PipelineDiagnosis) -> list[DiagnosisFinding]:
    bound = diagnosis.input_bound
    if diagnosis.target.step is None:
        return [DiagnosisFinding("input-bound", "not measured: the input-bound share needs a training step to feed "
                        "(--step MODULE:FUNCTION); throughput only", {}, None)]
    if bound is None:
        return []
    figure, label = bound.share, bound.classification
    evidence = {**estimate_evidence("share", figure), "t_real_s": bound.t_real, "t_synthetic_s": bound.t_synthetic}
    why = why_undecided(figure, percent)
    if why:
        return [DiagnosisFinding("input-bound", f"whether the step waits for input is {why}; no class is given "
                                 "from an undecided figure", evidence, None, figure)]
    recommendation = None
    if label != "not input-bound":
        recommendation = "the step waits for input: see the Python-function, prefetch and parallelism findings"
    return [DiagnosisFinding("input-bound", f"the pipeline is {label} ({figure.median:.0%} of step time "
                             f"{lost_words(bound)}; {span_words(figure, percent)}){wait_words(bound)}", evidence,
                             recommendation, figure)]


def _startup_verdicts(diagnosis: PipelineDiagnosis) -> list[DiagnosisFinding]:
    """The start-up and the step's first call, measured apart from every stage's figures."""
    if diagnosis.startup_s is None:
        return []
    parts = [f"importing and building the pipeline and its first batches {diagnosis.startup_s:.1f} s"]
    evidence = {"startup_s": diagnosis.startup_s}
    if diagnosis.throughput is not None:
        parts.append(f"the first batch {diagnosis.throughput.first_batch_s:.2f} s")
    if diagnosis.step is not None:
        parts.append(f"the step's first call {diagnosis.step.first_s:.2f} s (trace, compile)")
        evidence["first_call_s"] = diagnosis.step.first_s
    return [DiagnosisFinding("start-up", f"{'; '.join(parts)}: kept apart; the stages shared the budget left after "
                             "them", evidence, None)]


def _no_padding_because(diagnosis: PipelineDiagnosis) -> str:
    if diagnosis.layout is not None and diagnosis.layout.mel is None:
        return diagnosis.layout.mel_rule
    return "the throughput stage read no batches"


def _python_op_verdict(op: PythonOp, bound: InputBoundFigures | None, target: Target) -> DiagnosisFinding:
    calls = f" calling {op.python}" if op.python else ""
    calls += f" ({op.defined_at})" if op.defined_at else ""
    finding = (f"{op.op} op {op.node!r}{calls} runs Python for every element, under the GIL, in {op.transformation} "
               f"({op.transformation_node})")
    evidence = {"transformation": op.transformation_node, "function": op.function, "python": op.python,
                "defined_at": op.defined_at}
    waits, interval = _waits(bound), None if bound is None else bound.share
    if bound is not None:
        evidence["input_bound_share"] = bound.share.median
    if waits:
        return DiagnosisFinding("python-op", f"{finding}; the step waits for input ({bound.share.median:.0%})", evidence,
                       f"move {op.python or 'this function'} in {op.transformation} to TensorFlow ops (no GIL, runs "
                       "in parallel), or precompute its output", interval)
    return DiagnosisFinding("python-op", f"{finding}; {_no_change_because(bound, target)}", evidence, None, interval)


def _no_change_because(bound: InputBoundFigures | None, target: Target) -> str:
    if target.step is None:
        return "whether it costs training time needs --step (the input-bound share)"
    if bound is None:
        return "the input-bound share was not measured (no time)"
    why = why_undecided(bound.share, percent)
    if why:
        return f"whether it costs training time is {why}"
    return f"the step does not wait for input (share {bound.share.median:.0%}): no change needed here"


def _prefetch_verdicts(graph: GraphFindings, bound: InputBoundFigures | None, target: Target) -> list[DiagnosisFinding]:
    if graph.ends_with_prefetch or not graph.transformations:
        return []
    last = graph.last_stage or graph.transformations[-1]  # wrappers (with_options, ...) are not stages
    evidence = {"last_transformation": last, "inject_prefetch": graph.inject_prefetch}
    if bound is not None:
        evidence["input_bound_share"] = bound.share.median
    finding = f"no prefetch at the end of the pipeline (the last real stage is {last})"
    interval = None if bound is None else bound.share
    if graph.inject_prefetch:  # the measured figures already include the prefetch tf.data adds
        return [DiagnosisFinding("prefetch", f"{finding}; tf.data's inject_prefetch (on) adds one when the iterator starts, "
                        "so the figures measured here include it", evidence, None, interval)]
    finding += "; inject_prefetch is off, so none is added at run time"
    if _waits(bound):
        return [DiagnosisFinding("prefetch", f"{finding}; the step waits for input ({bound.share.median:.0%})", evidence,
                        "end the pipeline with .prefetch(tf.data.AUTOTUNE), so batches are prepared while the step "
                        "runs", interval)]
    return [DiagnosisFinding("prefetch", f"{finding}; {_no_change_because(bound, target)}", evidence, None, interval)]


def _shape_verdicts(graph: GraphFindings, step: StepRun | None, target: Target) -> list[DiagnosisFinding]:
    shapes = graph.dynamic_shapes
    retraces = None if step is None else step.retraces
    if not shapes and not retraces:
        return []
    where = ", ".join(f"{s.component or 'the element'} {s.shape}" for s in shapes) or "none in element_spec"
    evidence = {"dynamic": where, "retraces": retraces, "step_calls": None if step is None else step.calls}
    if target.step is None:
        return [DiagnosisFinding("shapes", f"dynamic shapes ({where}) can make a tf.function step retrace; --step measures "
                        "whether it does", evidence, None)]
    if retraces is None:
        return [DiagnosisFinding("shapes", f"dynamic shapes ({where}); the step is not a tf.function, so its retraces cannot "
                        "be counted", evidence, None)]
    if retraces:
        return [DiagnosisFinding("retracing", f"the step retraced {retraces} time(s) over {step.calls} calls in this run; "
                        f"dynamic shapes: {where}", evidence, retrace_recommendation(graph.buckets))]
    return [DiagnosisFinding("shapes", f"dynamic shapes ({where}), but the step did not retrace over {step.calls} calls in "
                    "this run", evidence, None)]
