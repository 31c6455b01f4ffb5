"""`perfsuite diagnose --pipeline MODULE:FUNCTION`: measure a user's own tf.data pipeline as it is, within
a time budget, and inspect its graph for what can cost training time.

After the start-up and the step's first calls (kept apart), budgeted stages measure steady throughput
(throughput.py), the input-bound share (given a step), the bottleneck (attribution.py), the fixes (fixes.py,
padding.py) and the feed rate; the time left goes to the undecided ones (plan.StageLog.resume). Verdicts come
only from measured figures: the graph says where to look, the figures whether it matters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from perfsuite.measure.batch_spec import BatchLayout, BatchSpec, find_layout
from perfsuite.measure.emulated import DEFAULT_STEP_PRESET
from perfsuite.measure.machine import MachineFingerprint
from perfsuite.measure.speech import canonical_batch
from perfsuite.measure.step_model import StepModel
from perfsuite.records import Record, migrate, migration
from perfsuite.tools.diagnose import rewrite
from perfsuite.tools.diagnose.attribution import Bottleneck, BottleneckRounds, bottleneck_verdicts
from perfsuite.tools.diagnose.fixes import FixGain, FixRounds, RewriteComparison, fix_verdicts
from perfsuite.tools.diagnose.graph import graph_findings
from perfsuite.tools.diagnose.input_bound import InputBoundStage, twin_of
from perfsuite.tools.diagnose.padding import PaddingComparison
from perfsuite.tools.diagnose.plan import (
    Budget,
    Event,
    Progress,
    Resumable,
    Stage,
    StageLog,
    no_progress,
)
from perfsuite.tools.diagnose.stages import feed_stage
from perfsuite.tools.diagnose.streams import Stream, buffered_elements, timed_next
from perfsuite.tools.diagnose.targets import (
    GraphFindings,
    inspect_graph,
    load_callable,
    load_step,
    make_dataset,
)
from perfsuite.tools.diagnose.throughput import Throughput, ThroughputRounds, throughput_verdicts
from perfsuite.tools.diagnose.work import WorkFigures, read_work, with_rates, work_verdicts
from perfsuite.verdict.diagnosis import (
    deferred_to_measured,
    feed_verdict,
    frame_assumed,
    input_bound_finding,
    percent,
    ranked_changes,
    retrace_recommendation,
    stage_verdicts,
    stand_in_step,
    why_undecided,
)
from perfsuite.verdict.diagnosis_figures import (
    DEFAULT_BUDGET_S,
    DiagnosisFinding,
    FeedFigures,
    InputBoundFigures,
    StageRecord,
    check_step_time,
    feed_figures_5_to_6,
    gpu_stats_6_to_7,
    without_kind,
)
from perfsuite.verdict.pipeline_findings import layout_finding, prefetch_finding, python_op_finding
from perfsuite.workload.pipeline_model import Pipeline, read_pipeline

PIPELINE_SCHEMA_VERSION = 6
PIPELINE_STAGE_NEEDS = {"throughput": 3.0, "input_bound": 6.0, "bottleneck": 3.0, "fixes": 4.0, "feed": 2.0}


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


def fields_added(data: dict) -> dict:
    """Schemas 5 (the input-bound figure's wait share, diagnose's schema 8 change) and 6 (the start-up's
    seconds, the bottleneck, the measured fixes, the work) only add fields; their defaults say 'not measured'."""
    return data


migration(PipelineDiagnosis, 4, 5)(fields_added)
migration(PipelineDiagnosis, 5, 6)(fields_added)


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

    needs = {name: need for name, need in PIPELINE_STAGE_NEEDS.items() if target.step or name != "input_bound"}
    budget = Budget(settings.budget_s, needs, clock)

    def tell(message: str) -> None:
        progress(Event("startup", "note", message, None, budget.elapsed_s(), budget.left_s()))

    tell(f"importing {target.pipeline}" + (f" and {target.step}" if target.step else ""))
    dataset = make_dataset(load_callable(target.pipeline, "--pipeline"), target.args, target.pipeline)
    step = load_step(target.step, tell) if target.step else None
    pipeline = read_pipeline(dataset)  # the one reading of the pipeline, handed to every stage that asks it
    graph = inspect_graph(pipeline)
    tell(f"graph as it runs: {graph.chain_words()}; {len(graph.python_ops)} Python-function op(s)")
    stream = Stream(dataset, target.pipeline)
    first_batch, first_s = timed_next(stream)
    warmup = [timed_next(stream) for _ in range(settings.warmup)]
    warmup_s = tuple(seconds for _, seconds in warmup)
    stream.close()  # its buffers would fill during the step's first calls: every stage reads a fresh one
    startup_s = budget.elapsed_s()
    layout = find_layout(first_batch, replace(settings.batch_spec, frame_s=settings.frame_s),
                         more=tuple(batch for batch, _ in warmup))
    tell(f"batches: {layout.words()}")
    tell(f"first batch {first_s:.2f} s, warm-up batches {', '.join(f'{s:.3f}' for s in warmup_s)} s")
    model = first_step = None
    if step is not None:
        model = StepModel(step, name=f"--step {target.step}")
        first = model.first_calls(first_batch)
        first_step = StepRun(first_s=first.first_s, first_steady_s=first.steady_s, calls=1, traces=first.traces,
                             retraces=None if first.traces is None else 0)
        tell(f"the step's first call {first.first_s:.2f} s (trace, compile), then {first.steady_s:.3g} s: "
             "kept apart, the budget left after it is split across the stages")
    read_from = budget.elapsed_s()
    work = read_work(pipeline, step, first_batch, pipeline_name=target.pipeline, step_name=target.step)
    tell(f"work read from the graphs in {budget.elapsed_s() - read_from:.1f} s (kept apart, as the start-up)")
    drain = settings.warmup + buffered_elements(pipeline)
    head = {"target": target, "settings": settings, "fingerprint": machine_fingerprint(), "graph": graph,
            "layout": layout, "startup_s": startup_s}
    run = StageLog(make=lambda **found: _with_verdicts(PipelineDiagnosis(**head, **found, verdicts=())),
                   parts={"throughput": None, "step": first_step, "input_bound": None, "feed": None,
                          "bottleneck": None, "fixes": (), "work": work},
                   budget=budget, progress=progress, checkpoint=checkpoint)
    run.save()
    run.tell_plan(after="the start-up" + (" and the step's first calls" if step is not None else ""))
    throughput = ThroughputRounds(dataset, target.pipeline, first_s, warmup_s, layout=layout, drain=drain)
    bottleneck = BottleneckRounds(pipeline, target.pipeline, warmup=settings.warmup)
    fixes = FixRounds(lambda stage: _fix_comparisons(stage, pipeline, graph, model, settings, target, layout,
                                                     run.parts["throughput"]))
    passes = {"throughput": Resumable(lambda stage: {"throughput": throughput.run(stage)}, throughput.more_rounds),
              "bottleneck": Resumable(lambda stage: {"bottleneck": bottleneck.run(stage)}, bottleneck.more_rounds),
              "fixes": Resumable(lambda stage: {"fixes": fixes.run(stage)}, fixes.more_rounds)}
    if model is not None:
        passes["input_bound"] = _input_bound_pass(model, first_step, first_batch, dataset, settings, target)

    def held() -> tuple[str, ...]:
        """The undecided stages, which keep their part of what is left for their second pass (run.resume)."""
        return tuple(name for name in run.undecided() if name in passes)

    for name in list(needs)[:-1]:  # every stage but the feed, the last one
        with run.stage(name, held=held() if name == "fixes" else ()) as stage:
            run.parts.update(passes[name].run(stage))
    with run.stage("feed", held=held()) as stage:
        run.parts["feed"] = _feed_stage(stage, pipeline, target, settings, layout, run.parts["throughput"],
                                        drain=drain)
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
    rate = _samples_per_s(throughput)
    audio = None if rate is None or throughput.audio_s_per_s is None else throughput.audio_s_per_s.median / rate
    step_s = bound.t_synthetic if bound is not None else step.first_steady_s if step is not None else None
    return with_rates(work, audio_s_per_sample=audio, samples_per_s=rate, step_s=step_s)


def _samples_per_s(throughput: Throughput | None) -> float | None:
    """The steady rate's median where it counts samples (a batch's leading dimension), else None."""
    counts_samples = throughput is not None and throughput.rate is not None and throughput.unit == "samples"
    return throughput.rate.median if counts_samples else None


def _fix_comparisons(stage: Stage, pipeline: Pipeline, graph: GraphFindings, step: StepModel | None,
                     settings: PipelineSettings, target: Target, layout: BatchLayout,
                     measured: Throughput | None) -> tuple[list, list[FixGain]]:
    """The fixes perfsuite can apply to this pipeline (padding first: the step's gain), and those it considered
    and cannot apply, with why."""
    try:
        fixes, skipped = rewrite.applicable_fixes(
            pipeline, ends_with_prefetch=graph.ends_with_prefetch, fill_limit_s=stage.left_s() / 4,
            samples_per_s=_samples_per_s(measured))
    except Exception as error:  # noqa: BLE001 -- a graph perfsuite cannot rewrite: said, not raised
        fixes, skipped = [], [rewrite.NotApplied("all", f"the graph could not be read for rewriting: {error}")]
    comparisons = [RewriteComparison(fix, pipeline, target.pipeline, warmup=settings.warmup, step=step)
                   for fix in fixes]
    padding = None if measured is None else measured.padding
    if padding is not None and padding.beyond_longest > 0 and not graph.buckets:
        comparisons.insert(0, PaddingComparison(step, pipeline.dataset, target.pipeline, layout=layout,
                                                padding=padding))
    elif graph.buckets:
        skipped.append(rewrite.NotApplied("bucketing", "the pipeline already buckets by length (group_by_window)"))
    return comparisons, [FixGain(name=s.name, words=s.name, applied=False, why=s.why) for s in skipped]


def _feed_stage(stage: Stage, pipeline: Pipeline, target: Target, settings: PipelineSettings, layout: BatchLayout,
                throughput: Throughput | None, *, drain: int) -> FeedFigures | None:
    """The pipeline against an emulated accelerator (stages.feed_stage), read from a fresh iterator drained of
    `drain` batches (the warm-up and what its buffers hold). Batches of any structure go on as {'mel', 'mel_len'}
    (speech.canonical_batch, the throughput stage's true lengths) where it found real frames, else as they are."""
    padding = None if throughput is None else throughput.padding
    canonical = padding is not None and padding.real_frames > 0
    if not canonical:
        stage.tell("note", "batches handed on as they are: " + ("the throughput stage found no real frames"
                                                               if layout is not None and layout.mel is not None
                                                               else "no audio component"))

    def start():
        stream = Stream(pipeline.dataset.repeat(), target.pipeline, drain=drain)
        return (canonical_batch(batch, layout) for batch in stream) if canonical else stream

    figures = feed_stage(stage, {target.pipeline: start}, step_time=settings.step_time)
    return figures[0] if figures else None


def _with_verdicts(diagnosis: PipelineDiagnosis) -> PipelineDiagnosis:
    return replace(diagnosis, verdicts=tuple(pipeline_verdicts(diagnosis)))


def _input_bound_pass(step: StepModel, first: StepRun, batch, dataset, settings: PipelineSettings,
                      target: Target) -> Resumable:
    """The input-bound stage (input_bound.InputBoundStage: the pipeline, a fresh Stream per side and round, vs
    the first batch repeated), each pass's parts its figures and the step's run: the rounds' calls added, the
    traces counted over them (those since the first calls, the work fingerprint's, left out)."""
    bound = InputBoundStage(step, first.first_steady_s, dataset, twin_of(batch), warmup=settings.warmup,
                            fresh=lambda data: Stream(data, target.pipeline))
    retraces_before = step.retraces

    def run(stage: Stage) -> dict:
        figures = bound.run(stage)
        retraces = None if retraces_before is None else step.retraces - retraces_before
        used = replace(first, calls=first.calls + bound.measurement.calls,
                       traces=None if first.traces is None else first.traces + retraces, retraces=retraces)
        return {"input_bound": figures, "step": used}

    return Resumable(run, bound.more_rounds)


# ------------------------------------------------------------------------------------------ verdicts


def pipeline_verdicts(diagnosis: PipelineDiagnosis) -> list[DiagnosisFinding]:
    """Findings from the measured figures; the graph findings are judged by them (a Python op or a
    missing prefetch is worth changing only when the step is measured to wait for input), and by the changes
    measured here where one went their way. The changes measured on this pipeline come first, ranked by gain
    (verdict.diagnosis.ranked_changes), then the rest. A figure resting on the assumed seconds per frame says
    so first; the feed verdict at a stand-in step is left out where the user gave --step (the real one)."""
    bound, graph, target, layout = diagnosis.input_bound, diagnosis.graph, diagnosis.target, diagnosis.layout
    waits = None if bound is None or not bound.share.decided else bound.classification != "not input-bound"
    judged = {"waits": waits, "why_not": _no_change_because(bound, target),
              "share": None if bound is None else bound.share}
    out = stage_verdicts(diagnosis.stages, budget_s=diagnosis.settings.budget_s)
    if layout is not None:
        out.append(layout_finding(layout))
    out += _startup_verdicts(diagnosis)
    if diagnosis.throughput is not None:
        out += throughput_verdicts(diagnosis.throughput)
    if target.step is None:
        out.append(DiagnosisFinding("input-bound", "not measured: the input-bound share needs a training step to "
                                    "feed (--step MODULE:FUNCTION); throughput only", {}, None))
    elif bound is not None:
        out.append(input_bound_finding("input-bound", "the pipeline", bound, "the step waits for input: see the "
                                       "Python-function, prefetch and parallelism findings"))
    out += bottleneck_verdicts(diagnosis.bottleneck)
    out += fix_verdicts(diagnosis.fixes)
    out += [python_op_finding(op, **judged) for op in graph.python_ops]
    last = graph.last_stage or (graph.transformations[-1] if graph.transformations else None)  # wrappers skipped
    out.append(prefetch_finding(last, graph.ends_with_prefetch, graph.inject_prefetch, **judged))
    out += graph_findings(graph, padding=None if diagnosis.throughput is None else diagnosis.throughput.padding,
                          not_measured=layout.mel_rule if layout is not None and layout.mel is None
                          else "the throughput stage read no batches", **judged)
    out += _shape_verdicts(graph, diagnosis.step, target)
    if diagnosis.feed is not None and not (target.step and stand_in_step(diagnosis.feed)):
        out.append(feed_verdict(diagnosis.feed))
    out += work_verdicts(diagnosis.work)
    changes, rest = ranked_changes(deferred_to_measured([frame_assumed(f, layout) for f in out if f is not None]))
    return changes + rest


def _no_change_because(bound: InputBoundFigures | None, target: Target) -> str:
    """Why a graph finding calls for no change: the input-bound share not measured, undecided, or low."""
    if target.step is None:
        return "whether it costs training time needs --step (the input-bound share)"
    if bound is None:
        return "the input-bound share was not measured (no time)"
    why = why_undecided(bound.share, percent)
    if why:
        return f"whether it costs training time is {why}"
    return f"the step does not wait for input (share {bound.share.median:.0%}): no change needed here"


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


def _shape_verdicts(graph: GraphFindings, step: StepRun | None, target: Target) -> list[DiagnosisFinding]:
    shapes, retraces = graph.dynamic_shapes, None if step is None else step.retraces
    if not shapes and not retraces:
        return []
    where = ", ".join(f"{s.component or 'the element'} {s.shape}" for s in shapes) or "none in element_spec"
    evidence = {"dynamic": where, "retraces": retraces, "step_calls": None if step is None else step.calls}
    if target.step is None:
        finding = f"dynamic shapes ({where}) can make a tf.function step retrace; --step measures whether it does"
    elif retraces is None:
        finding = f"dynamic shapes ({where}); the step is not a tf.function, so its retraces cannot be counted"
    elif retraces:
        return [DiagnosisFinding("retracing", f"the step retraced {retraces} time(s) over {step.calls} calls in this "
                                 f"run; dynamic shapes: {where}", evidence, retrace_recommendation(graph.buckets))]
    else:
        finding = f"dynamic shapes ({where}), but the step did not retrace over {step.calls} calls in this run"
    return [DiagnosisFinding("shapes", finding, evidence, None)]
