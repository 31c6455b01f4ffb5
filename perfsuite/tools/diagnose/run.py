"""`perfsuite diagnose DATASET_DIR`: measure a user's LJSpeech-layout dataset end to end within a time budget, and
say what holds its training input back and how sure that is: check-data, then the stages of stages.py, each in rounds
until its figures are decided or its share of the budget (plan.py) is spent. Every figure is a RoundsEstimate, so a
verdict says when its interval straddles a class boundary or rests on too few rounds. docs/diagnose.md gives the
reasons behind each choice and threshold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from perfsuite.measure.teardown import iterate
from perfsuite.tools.diagnose.plan import (
    STAGE_NEEDS,
    STAGES,
    Budget,
    Event,
    Progress,
    Resumable,
    StageLog,
    no_progress,
)
from perfsuite.tools.diagnose.stages import (
    LoaderRounds,
    feed_stage,
    gpu_sampled,
    input_bound_stage,
    step_stage,
    sweep_stage,
    trace_stage,
)
from perfsuite.tools.diagnose.views import (
    measured_data,
    readable_utterances,
    repeat_copies,
    round_samples,
)
from perfsuite.verdict.diagnosis import verdicts
from perfsuite.verdict.diagnosis_figures import (
    LOADER_PIPELINES,
    DataSummary,
    DiagnoseSettings,
    Diagnosis,
    Pipeline,
    Problem,
    Repeat,
    StaticShapes,
)


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
    records = readable_utterances(dataset_dir, mel_config)
    ids = [record.id for record in records]
    copies = repeat_copies(len(ids), settings)
    # A bad WAV can be listed twice (the WAV and its missing cache entry): count utterances, not problems.
    data = DataSummary(checked=report.checked, usable=len(ids), skipped=report.checked - len(ids),
                       sources=tuple(report.sources),
                       problems=tuple(Problem(path=p.path, reason=p.reason) for p in report.problems),
                       repeat=Repeat(copies=copies, utterances_measured=copies * len(ids),
                                     round_samples=round_samples(settings)))
    shapes = StaticShapes(max_text_len=max(len(r.tokens) for r in records),
                          max_mel_frames=max(r.mel_frames for r in records))
    head = {"dataset": str(dataset_dir), "settings": settings, "fingerprint": machine_fingerprint(),
            "data": data, "static_shapes": shapes}

    def note(message: str) -> None:
        progress(Event("check", "note", message, None, budget.elapsed_s(), budget.left_s()))

    with measured_data(dataset_dir, cache_dir, ids, copies, mel_config, note) as (measured_dir, measured_cache, cache):
        head["cache"] = cache
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


def _measure(run: StageLog, *, dataset_dir: Path, cache_dir: Path, settings: DiagnoseSettings, mel_config,
             trace_dir: Path | None, shapes: StaticShapes) -> None:
    """The stages in order; each one's figures go into run.parts as it ends."""
    loader = _loader_factory(dataset_dir, cache_dir, settings, mel_config, shapes)
    loaders = LoaderRounds(loader, settings)
    with run.stage("loaders") as stage:
        run.parts.update(loaders.run(stage))
    with run.stage("step") as stage:
        batch = next(iter(loader(Pipeline("tf_native", "cache"))))
        steps, step = step_stage(stage, batch, settings, (None, shapes.max_text_len, shapes.max_mel_frames))
        run.parts["step"] = step
    fastest = steps[step.input_bound_mode]
    with run.stage("input_bound") as stage:
        run.parts["input_bound"], run.parts["gpu"] = gpu_sampled(
            lambda: input_bound_stage(stage, fastest, step.input_bound_call_s, batch, loader, settings))
    with run.stage("feed") as stage:
        run.parts["feed"] = feed_stage(stage, {p.label: lambda p=p: iterate(loader(p)) for p in LOADER_PIPELINES},
                                       step_time=settings.step_time, mel_config=mel_config)
    with run.stage("sweep") as stage:
        run.parts["sweep"] = sweep_stage(stage, loader, settings)
    if trace_dir is not None:
        with run.stage("trace") as stage:
            run.parts["trace"] = trace_stage(stage, fastest, step.input_bound_call_s,
                                              loader(Pipeline("tf_native", "wav")), Path(trace_dir),
                                              settings.trace_steps)
    run.resume({"loaders": Resumable(loaders.run, loaders.more_rounds)})  # the time the others left


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
