"""`perfsuite diagnose`: the one diagnosis of a tf.data pipeline, the user's (--pipeline) or the dataset preset's
(preset.py), measured as it is within a time budget. After the start-up (kept apart), budgeted stages measure the
throughput, the input-bound share (with a step; the GPU sampled meanwhile), the bottleneck, the capacity, the
fixes and alternatives, the feed rate, the preset's sweep and the trace; the time left goes to the undecided ones
(plan.StageLog.resume). The graph says where to look, the measured figures whether it matters."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfsuite.measure.batch_spec import BatchLayout, find_layout
from perfsuite.measure.speech import canonical_batch
from perfsuite.measure.step_model import StepModel
from perfsuite.tools.diagnose import rewrite
from perfsuite.tools.diagnose.attribution import BottleneckRounds
from perfsuite.tools.diagnose.capacity import CapacityRounds, with_step_need
from perfsuite.tools.diagnose.fixes import FixRounds, RewriteComparison
from perfsuite.tools.diagnose.input_bound import InputBoundStage, twin_of
from perfsuite.tools.diagnose.padding import PaddingComparison
from perfsuite.tools.diagnose.plan import Budget, Event, Progress, Resumable, Stage, StageLog, no_progress
from perfsuite.tools.diagnose.preset import PRESET_FIXES_NEED, Source, dataset_source
from perfsuite.tools.diagnose.stages import feed_stage, gpu_sampled, sweep_stage, trace_stage
from perfsuite.tools.diagnose.streams import Stream, buffered_elements, timed_next
from perfsuite.tools.diagnose.targets import load_callable, load_step, make_dataset
from perfsuite.tools.diagnose.throughput import ThroughputRounds
from perfsuite.tools.diagnose.work import read_work, with_rates
from perfsuite.verdict import diagnosis_figures as fig
from perfsuite.verdict.diagnosis_record import Diagnosis
from perfsuite.verdict.pipeline_findings import verdicts
from perfsuite.workload.pipeline_model import Pipeline, read_pipeline

STAGE_NEEDS = {"throughput": 3.0, "input_bound": 6.0, "bottleneck": 3.0, "capacity": 3.0, "fixes": 4.0,
               "feed": 2.0, "sweep": 3.0, "trace": 1.0}


def diagnose(*, target: fig.Target, settings: fig.DiagnoseSettings, cache_dir: Path | None = None,
             trace_dir: Path | None = None, progress: Progress = no_progress,
             checkpoint: Callable[[Diagnosis], None] | None = None,
             clock: Callable[[], float] = time.monotonic) -> Diagnosis:
    """Import (or, for the preset, check and load), inspect and measure target within settings.budget_s.
    checkpoint() is called after the start-up and after every stage with what exists (complete=False), and at the
    end (complete=True). TargetError for a target perfsuite cannot use, StepError (named '--step MODULE:FUNCTION')
    for a step that raises or returns no tensor, DataError for a dataset with nothing usable; a KeyboardInterrupt
    is passed on after the interrupted stage was checkpointed."""
    from perfsuite.measure.machine import machine_fingerprint

    stages = {"input_bound": target.step, "sweep": target.dataset, "trace": target.step and trace_dir}
    needs = {name: need for name, need in STAGE_NEEDS.items() if stages.get(name, True)}
    if target.dataset is not None:  # the preset's alternatives are measured in the fixes stage too
        needs["fixes"] += PRESET_FIXES_NEED
    budget = Budget(settings.budget_s, needs, clock)

    def tell(message: str) -> None:
        progress(Event("startup", "note", message, None, budget.elapsed_s(), budget.left_s()))

    with _source(target, settings, cache_dir, tell) as source:
        run, start = _startup(source, target, settings, budget, tell, progress, checkpoint, machine_fingerprint())
        _measure(run, start, source, settings, trace_dir)
    final = run.snapshot(complete=True)
    if checkpoint is not None:
        checkpoint(final)
    return final


def _source(target: fig.Target, settings: fig.DiagnoseSettings, cache_dir: Path | None, tell):
    """What target measures: the preset over its directory, or the user's factory called and step loaded."""
    if target.dataset is not None:
        return dataset_source(Path(target.dataset), settings, cache_dir, tell)
    tell(f"importing {target.pipeline}" + (f" and {target.step}" if target.step else ""))
    dataset = make_dataset(load_callable(target.pipeline, "--pipeline"), target.args, target.pipeline)
    return contextlib.nullcontext(Source(dataset=dataset, step=load_step(target.step, tell) if target.step else None,
                                         parts={}))


@dataclass(frozen=True)
class Startup:
    """What the start-up found, which the stages ask: the pipeline read once (name: its spec, for messages), its
    graph and batch layout, the step (None: none given), the first batch and its seconds, the warm-up batches'
    seconds, and the batches a fresh iterator drains before it is steady (the warm-up and what the pipeline's
    buffers hold)."""

    name: str
    pipeline: Pipeline
    graph: fig.GraphFindings
    layout: BatchLayout
    model: StepModel | None
    first_batch: Any
    first_s: float
    warmup_s: tuple[float, ...]
    drain: int


def _startup(source: Source, target: fig.Target, settings: fig.DiagnoseSettings, budget: Budget, tell, progress,
             checkpoint, fingerprint) -> tuple[StageLog, Startup]:
    """The pipeline read once, its first batches, the step's first calls and the work, kept apart from the
    stages; the run that holds them, and what they found."""
    dataset = source.dataset
    pipeline = read_pipeline(dataset)  # the one reading of the pipeline, handed to every stage that asks it
    graph = fig.GraphFindings.of(pipeline)
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
    if source.step is not None:
        model = StepModel(source.step, name=f"--step {target.step}")
        first = model.first_calls(first_batch)
        first_step = fig.StepRun(first_s=first.first_s, first_steady_s=first.steady_s, calls=1, traces=first.traces,
                                 retraces=None if first.traces is None else 0)
        tell(f"the step's first call {first.first_s:.2f} s (trace, compile), then {first.steady_s:.3g} s: "
             "kept apart, the budget left after it is split across the stages")
    read_from = budget.elapsed_s()
    work = read_work(pipeline, source.step, first_batch, pipeline_name=target.pipeline, step_name=target.step)
    tell(f"work read from the graphs in {budget.elapsed_s() - read_from:.1f} s (kept apart, as the start-up)")
    head = {"target": target, "settings": settings, "fingerprint": fingerprint, "graph": graph, "layout": layout,
            "startup_s": startup_s, **source.parts}
    run = StageLog(make=lambda **found: _with_verdicts(Diagnosis(**head, **found, verdicts=())),
                   parts={"step": first_step, "work": work}, budget=budget, progress=progress, checkpoint=checkpoint)
    run.save()
    run.tell_plan(after="the start-up" + (" and the step's first calls" if model is not None else ""))
    return run, Startup(name=target.pipeline, pipeline=pipeline, graph=graph, layout=layout, model=model,
                        first_batch=first_batch, first_s=first_s, warmup_s=warmup_s,
                        drain=settings.warmup + buffered_elements(pipeline))


def _measure(run: StageLog, start: Startup, source: Source, settings: fig.DiagnoseSettings, trace_dir: Path | None
             ) -> None:
    """The stages in order, each one's figures into run.parts as it ends; then the undecided ones again."""
    pipeline, model, batch = start.pipeline, start.model, start.first_batch
    throughput = ThroughputRounds(pipeline.dataset, start.name, start.first_s, start.warmup_s,
                                  layout=start.layout, drain=start.drain)
    bottleneck = BottleneckRounds(pipeline, start.name, warmup=settings.warmup)
    capacity = CapacityRounds(pipeline, start.name, warmup=settings.warmup, target_cores=settings.cores)
    fixes = FixRounds(lambda stage: _fix_comparisons(stage, start, settings, run.parts.get("throughput"),
                                                     capacity.split_fix(run.parts.get("capacity")),
                                                     source.alternatives(pipeline, batch)))
    passes = {"throughput": Resumable(lambda stage: {"throughput": throughput.run(stage)}, throughput.more_rounds),
              "bottleneck": Resumable(lambda stage: {"bottleneck": bottleneck.run(stage)}, bottleneck.more_rounds),
              "capacity": Resumable(lambda stage: {"capacity": capacity.run(stage)}, capacity.more_rounds),
              "fixes": Resumable(lambda stage: {"fixes": fixes.run(stage)}, fixes.more_rounds)}
    if model is not None:
        passes["input_bound"] = _input_bound_pass(model, run.parts["step"], start, settings)

    def held() -> tuple[str, ...]:
        """The undecided stages, which keep their part of what is left for their second pass (run.resume)."""
        return tuple(name for name in run.undecided() if name in passes)

    for name in (name for name in run.budget.needs if name in passes):
        with run.stage(name, held=held() if name == "fixes" else ()) as stage:
            run.parts.update(passes[name].run(stage))
    with run.stage("feed", held=held()) as stage:
        run.parts["feed"] = _feed_stage(stage, start, settings, run.parts.get("throughput"))
    if source.loader is not None:
        with run.stage("sweep", held=held()) as stage:
            run.parts["sweep"] = sweep_stage(stage, source.loader, settings)
    if "trace" in run.budget.needs:
        with run.stage("trace", held=held()) as stage:
            run.parts["trace"] = trace_stage(stage, model, run.parts["step"].first_steady_s,
                                             pipeline.dataset, Path(trace_dir), settings.trace_steps)
    run.resume(passes)  # the time decided stages left goes to those still undecided
    fixes.close()
    parts = run.parts
    throughput, bound, step = parts.get("throughput"), parts.get("input_bound"), parts["step"]
    rate = None if throughput is None else throughput.samples_per_s
    audio = None if rate is None or throughput.audio_s_per_s is None else throughput.audio_s_per_s.median / rate
    # the step's steady seconds: fed the synthetic twin where measured, else its second call
    step_s = bound.t_synthetic if bound is not None else step.first_steady_s if step is not None else None
    parts["work"] = with_rates(parts["work"], audio_s_per_sample=audio, samples_per_s=rate, step_s=step_s)
    parts["capacity"] = with_step_need(parts.get("capacity"), settings.step_time, batch, parts.get("input_bound"),
                                       parts["step"], parts.get("feed"))


def _fix_comparisons(stage: Stage, start: Startup, settings: fig.DiagnoseSettings, measured: fig.Throughput | None,
                     split: rewrite.Fix | rewrite.NotApplied, alternatives: list) -> tuple[list, list[fig.FixGain]]:
    """The fixes perfsuite can apply to this pipeline (padding first: the step's gain; the capacity model's split
    after the rewrites; the source's alternatives last), and those it considered and cannot apply, with why."""
    pipeline, graph, step = start.pipeline, start.graph, start.model
    try:
        fixes, skipped = rewrite.applicable_fixes(
            pipeline, ends_with_prefetch=graph.ends_with_prefetch, fill_limit_s=stage.left_s() / 4,
            samples_per_s=None if measured is None else measured.samples_per_s)
    except Exception as error:  # noqa: BLE001 -- a graph perfsuite cannot rewrite: said, not raised
        fixes, skipped = [], [rewrite.NotApplied("all", f"the graph could not be read for rewriting: {error}")]
    (fixes if isinstance(split, rewrite.Fix) else skipped).append(split)
    comparisons = [RewriteComparison(fix, pipeline, start.name, warmup=settings.warmup, step=step)
                   for fix in fixes]
    padding = None if measured is None else measured.padding
    if padding is not None and padding.beyond_longest > 0 and not graph.buckets:
        comparisons.insert(0, PaddingComparison(step, pipeline.dataset, start.name, layout=start.layout,
                                                padding=padding))
    elif graph.buckets:
        skipped.append(rewrite.NotApplied("bucketing", "the pipeline already buckets by length (group_by_window)"))
    refused = [fig.FixGain(name=s.name, words=s.name, applied=False, why=s.why) for s in skipped]
    return comparisons + alternatives, refused


def _feed_stage(stage: Stage, start: Startup, settings: fig.DiagnoseSettings, throughput: fig.Throughput | None
                ) -> fig.FeedFigures | None:
    """The pipeline against an emulated accelerator (stages.feed_stage), read from a fresh iterator drained of
    start.drain batches (the warm-up and what its buffers hold). Batches of any structure go on as {'mel', 'mel_len'}
    (speech.canonical_batch, the throughput stage's true lengths) where it found real frames, else as they are."""
    layout, padding = start.layout, None if throughput is None else throughput.padding
    canonical = padding is not None and padding.real_frames > 0
    if not canonical:
        stage.tell("note", "batches handed on as they are: " + ("the throughput stage found no real frames"
                                                               if layout is not None and layout.mel is not None
                                                               else "no audio component"))

    def batches():
        stream = Stream(start.pipeline.dataset.repeat(), start.name, drain=start.drain)
        return (canonical_batch(batch, layout) for batch in stream) if canonical else stream

    return feed_stage(stage, start.name, batches, step_time=settings.step_time)


def _with_verdicts(diagnosis: Diagnosis) -> Diagnosis:
    return replace(diagnosis, verdicts=tuple(verdicts(diagnosis)))


def _input_bound_pass(step: StepModel, first: fig.StepRun, start: Startup, settings: fig.DiagnoseSettings) -> Resumable:
    """The input-bound stage (input_bound.InputBoundStage: the pipeline, a fresh Stream per side and round, vs
    the first batch repeated), each pass's parts its figures, the GPU sampled around its rounds, and the step's
    run: the rounds' calls added, the traces counted over them (those since the first calls, the work
    fingerprint's, left out)."""
    bound = InputBoundStage(step, first.first_steady_s, start.pipeline.dataset, twin_of(start.first_batch),
                            warmup=settings.warmup, fresh=lambda data: Stream(data, start.name))
    retraces_before = step.retraces

    def run(stage: Stage) -> dict:
        figures, gpu = gpu_sampled(lambda: bound.run(stage))
        retraces = None if retraces_before is None else step.retraces - retraces_before
        used = replace(first, calls=first.calls + bound.measurement.calls,
                       traces=None if first.traces is None else first.traces + retraces, retraces=retraces)
        return {"input_bound": figures, "step": used, "gpu": gpu}

    return Resumable(run, bound.more_rounds)
