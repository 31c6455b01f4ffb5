"""The measuring stages of a diagnosis (loaders, step, input-bound share, emulated feed, sweep, trace),
each a function of its Stage, returning its figures as records."""

from __future__ import annotations

import contextlib
import functools
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfsuite.measure.emulated import (  # no TensorFlow
    DEFAULT_MEL,
    MIN_INTERVAL_S,
    EmulatedRunConfig,
    FeedRateConfig,
    emulated_stats,
    feed_rate,
    parse_step_time,
    run_emulated,
)
from perfsuite.measure.rounds import InterleavedRounds
from perfsuite.measure.step_model import FirstCalls, StepModel
from perfsuite.measure.teardown import iterate
from perfsuite.tools.diagnose.input_bound import InputBoundStage, side_steps, twin_of
from perfsuite.tools.diagnose.plan import (
    FEED_ROUND_SAMPLES,
    FEED_SEARCH_SHARE,
    MAX_STEP_CALLS,
    MIN_FEED_S,
    Stage,
    calls_that_fit,
    more_rounds_for,
    split_budget,
    status_from,
    status_of,
    worst_status,
)
from perfsuite.verdict.diagnosis import feed_words
from perfsuite.verdict.diagnosis_figures import (
    CACHE_BOUNDARIES,
    DECIDED,
    LOADER_BOUNDARIES,
    LOADER_PAIRS,
    LOADER_PIPELINES,
    MIN_ROUNDS,
    STEP_BOUNDARIES,
    STEP_MODES,
    STEP_RATIOS,
    SWEEP_ALPHA,
    SWEEP_AXES,
    SWEEP_BOUNDARIES,
    SWEEP_MIN_GAIN,
    SWEEP_MIN_WIN_SHARE,
    TOO_SHORT,
    UNDECIDED,
    VARIATION_BOUNDARIES,
    DiagnoseSettings,
    FeedFigures,
    GpuFigures,
    LoaderComparison,
    Pipeline,
    PipelineFigures,
    StepFigures,
    StepMode,
    StepRatio,
    SweepAxis,
    SweepPoint,
    estimate,
)


class LoaderRounds:
    """Every LOADER_PIPELINES loader in interleaved rounds (_dataset_rounds) until every LOADER_PAIRS ratio is
    decided or the share is spent. run() again adds rounds to the earlier ones (resume's second pass),
    continuing their order."""

    def __init__(self, loader, settings: DiagnoseSettings):
        self.settings = settings
        self.rounds = _dataset_rounds({p: (p.label, loader(p), settings.batches) for p in LOADER_PIPELINES},
                                      warmup=settings.warmup)

    @property
    def runs(self) -> dict[Pipeline, list]:
        """Each loader's measurement per round, the warm-up round's first."""
        return {p: self.rounds.warmups[p] + self.rounds.values[p] for p in LOADER_PIPELINES}

    def comparisons(self) -> tuple[LoaderComparison, ...]:
        from perfsuite.measure import stats

        speeds = {p: [m.samples_per_s for m in measured] for p, measured in self.rounds.values.items()}
        found = []
        for a, b in LOADER_PAIRS:
            if speeds[a]:
                ratios = stats.ratio_of(speeds[a], speeds[b])
                boundaries = LOADER_BOUNDARIES if a.source == b.source else CACHE_BOUNDARIES
                found.append(LoaderComparison(a=a, b=b, ratios=tuple(ratios), ratio=estimate(ratios, boundaries)))
        return tuple(found)

    def more_rounds(self) -> float:
        """Rounds more for every ratio to be decided (plan.more_rounds_for; MIN_ROUNDS with none yet)."""
        return max((more_rounds_for(c.ratio) for c in self.comparisons()), default=float(MIN_ROUNDS))

    def run(self, stage: Stage) -> dict:
        """Rounds within the stage's share; pipelines and comparisons, empty without a measured round."""
        settings, done = self.settings, self.rounds.rounds_run
        stage.planned(f"{len(LOADER_PIPELINES)} loaders x ({settings.warmup} + {settings.batches}) batches per "
                       f"round, interleaved, {'after a short warm-up round' if not done else 'more rounds'}; "
                       "rounds until the same-round ratios are decided")

        def decided() -> bool:
            return all(c.ratio.decided for c in self.comparisons())

        self.rounds.until_decided(decided, driver=stage.rounds_until_decided)
        measured = max(0, self.rounds.rounds_run - 1)  # both passes, less the warm-up round
        stage.status = status_from(measured > 0 and decided(), measured)
        if not measured:
            return {"pipelines": (), "comparisons": ()}
        return {"pipelines": tuple(_pipeline_figures(p, self.runs[p]) for p in LOADER_PIPELINES),
                "comparisons": self.comparisons()}


def _dataset_rounds(reads: dict, *, warmup: int) -> InterleavedRounds:
    """Interleaved rounds (A B C, C B A, ...) of reads, {label: (name, dataset, timed batches)}: each a fresh
    iterator, its first `warmup` batches untimed (timing.measure_dataset). The first round of all is a short
    warm-up (start-up, first file reads: one batch each), whose time only sizes the next round."""
    from perfsuite.measure import timing

    def measure(label):
        name, dataset, batches = reads[label]
        return timing.measure_dataset(dataset=dataset, name=name, warmup_batches=warmup,
                                      measure_batches=1 if rounds.warming_up else batches)

    rounds = InterleavedRounds({label: functools.partial(measure, label) for label in reads}, warmup_rounds=1)
    return rounds


def _pipeline_figures(pipeline: Pipeline, measurements: list) -> PipelineFigures:
    """A loader's rounds (the first a warm-up) as PipelineFigures."""
    from perfsuite.measure import timing

    first, *steady = measurements
    return PipelineFigures(pipeline=pipeline, loader=timing.combine(steady, name=pipeline.label, first=first),
                           samples_per_s=estimate([m.samples_per_s for m in steady]),
                           variation=estimate([m.summary.variation_ratio for m in steady], VARIATION_BOUNDARIES))


def step_stage(stage: Stage, batch, settings: DiagnoseSettings, shapes) -> tuple[dict, StepFigures]:
    """The step in every STEP_MODES mode on one fixed batch: the first calls (trace, compile; whatever the share,
    as without them there is no step to measure) and one steady call each size interleaved rounds of calls, added
    until both STEP_RATIOS are decided or the share is spent. Returns ({mode: the step}, its figures)."""
    from perfsuite.workload.model import MODEL_PRESETS, make_train_step

    stage.tell("note", f"first calls of the {settings.model} step in eager, graph and XLA mode (trace, compile)")
    models, first = {}, {}
    for mode in STEP_MODES:
        step = make_train_step(model_config=MODEL_PRESETS[settings.model], mode=mode, input_shapes=shapes)
        models[mode] = StepModel(step, name=f"step-{mode}")
        first[mode] = models[mode].first_calls(batch)
        stage.tell("note", f"{mode}: first call {first[mode].first_s:.2f} s, then "
                           f"{first[mode].steady_s:.3f} s per call")
    round_call_s = sum(first[mode].steady_s for mode in STEP_MODES)
    calls = calls_that_fit(stage.left_s(), round_call_s, most=MAX_STEP_CALLS)
    stage.planned(f"interleaved rounds of {calls} call(s) per mode, about {calls * round_call_s:.1f} s each, until "
                   f"graph/eager and XLA/graph are decided; {max(stage.left_s(), 0):.0f} s of the share left after the "
                   "first calls")

    def one_mode(model: StepModel) -> tuple[float, ...]:  # a mode's round: the seconds of each call
        return tuple(model.call_s(batch) for _ in range(calls))

    rounds = InterleavedRounds({mode: functools.partial(one_mode, models[mode]) for mode in STEP_MODES})
    per_round = rounds.values
    outcome = rounds.until_decided(lambda: all(r.ratio.decided for r in _step_ratios(per_round).values()),
                                   driver=stage.rounds_until_decided, first_estimate_s=calls * round_call_s)
    stage.status = status_of(outcome)
    modes = {mode: _step_mode(first[mode], per_round[mode], models[mode].retraces) for mode in STEP_MODES}
    ratios = _step_ratios(per_round)
    # The input-bound stage feeds the faster compiled mode: by the same-round ratio, else by the first steady calls.
    xla_faster = (ratios["xla_over_graph"].ratio.median > 1 if "xla_over_graph" in ratios
                  else modes["xla"].first_steady_s < modes["graph"].first_steady_s)
    return {mode: model.step for mode, model in models.items()}, StepFigures(
        modes=modes, ratios=ratios, calls_per_round=calls, input_bound_mode="xla" if xla_faster else "graph")


def _step_ratios(per_round: dict[str, list]) -> dict[str, StepRatio]:
    """Per STEP_RATIOS name, the faster mode's speed over the slower one's in each round; {} before a round."""
    if not per_round[STEP_MODES[0]]:
        return {}
    means = {mode: [statistics.fmean(calls) for calls in rounds] for mode, rounds in per_round.items()}
    ratios = {name: tuple(s / f for s, f in zip(means[slower], means[faster]))
              for name, (faster, slower) in STEP_RATIOS.items()}
    return {name: StepRatio(rounds=rounds, ratio=estimate(rounds, STEP_BOUNDARIES)) for name, rounds in ratios.items()}


def _step_mode(first: FirstCalls, rounds: list[tuple[float, ...]], retraces: int | None) -> StepMode:
    return StepMode(first_s=first.first_s, first_steady_s=first.steady_s,
                    call_s=tuple(s for calls in rounds for s in calls),
                    step_s=estimate([statistics.fmean(calls) for calls in rounds]) if rounds else None,
                    traces=None if first.traces is None else first.traces + retraces, retraces=retraces)


def input_bound_stage(stage: Stage, step, call_s: float, batch, loader, settings: DiagnoseSettings):
    """The compiled step fed by each LOADER_PIPELINES pipeline vs by the synthetic twin (the fixed batch repeated:
    every loader pads to the same static shapes, so one batch stands for all), an input_bound.InputBoundStage each,
    their rounds together; a pipeline leaves them once its share is decided. The figures of each pipeline measured."""
    warmup, model, twin = settings.warmup, StepModel(step, name="step"), twin_of(batch)
    bounds = [InputBoundStage(model, call_s, loader(pipeline), twin, warmup=warmup, fresh=iterate, pipeline=pipeline)
              for pipeline in LOADER_PIPELINES]
    sides = 2 * len(bounds)
    batches = side_steps(stage.left_s(), call_s, sides=sides, warmup=warmup)
    round_s = sides * (warmup + batches) * call_s
    stage.planned(f"rounds of {sides} sides ({len(bounds)} pipelines, each beside the synthetic twin) x ({warmup} "
                   f"untimed + {batches} timed steps of about {call_s:.3g} s), about {round_s:.1f} s per round; a "
                   "pipeline leaves the rounds once its share is decided")

    def undecided() -> list[InputBoundStage]:
        return [bound for bound in bounds if not bound.decided()]

    def one_round(index: int) -> None:
        for bound in undecided():
            bound.one_round(batches)

    outcome = stage.rounds_until_decided(one_round, decided=lambda: not undecided(), first_estimate_s=round_s)
    stage.status = status_of(outcome)
    return tuple(bound.figures() for bound in bounds if bound.measured() is not None)


def feed_stage(stage: Stage, sources: dict[str, Callable[[], Iterator]], *, step_time: str | None,
               mel_config=DEFAULT_MEL) -> tuple[FeedFigures, ...]:
    """Each source ({label: a function that starts its endless batch iterator}) against an emulated accelerator:
    its feed rate, then a round at step_time; what is left of the share, once the iterator is started (a
    pipeline's may drain its buffers first), split evenly over the sources still to measure. A source left with
    MIN_FEED_S or less ends the stage TOO_SHORT, saying so."""
    stage.planned(f"{len(sources)} pipeline(s): a feed-rate search each, then a round at the {step_time} step")
    out = []
    for index, (label, start) in enumerate(sources.items()):
        batches = start()
        share_s = stage.left_s() / (len(sources) - index)
        if share_s <= MIN_FEED_S:
            stage.planned(f"{label}: no time left for a feed-rate search once its iterator started (draining its "
                          f"buffers, where it does, can take the whole share): {stage.left_s():.1f} s left", TOO_SHORT)
            return tuple(out)
        figures = feed_figures(batches, label=label, step_time=step_time, share_s=share_s, mel_config=mel_config)
        out.append(figures)
        stage.rounds += 1
        stage.tell("round", f"{label}: {feed_words(figures)}")
    stage.status = DECIDED if all(f.keeps_busy is not None for f in out) else UNDECIDED
    return tuple(out)


def feed_figures(source: Iterator, *, label: str, step_time: str | None, share_s: float,
                 mel_config=DEFAULT_MEL) -> FeedFigures:
    """The feed rate of an endless batch iterator (a search of FEED_SEARCH_SHARE of share_s), then one
    round at step_time (None: no round), of FEED_ROUND_SAMPLES utilisation samples where the rest of
    share_s holds them, else of its minimum batches (too short to detect a cycle). A step the batches
    cannot give (a per-frame preset on batches without mel_len) leaves the round out, with the reason."""
    result = feed_rate(source, config=FeedRateConfig(budget_s=FEED_SEARCH_SHARE * share_s), mel_config=mel_config)
    no_round = functools.partial(FeedFigures, pipeline=label, feed=result, step_time=step_time, step_s=None,
                                 keeps_busy=None, round=None, stats=None, timeline=None)
    if step_time is None:
        return no_round(reason="no step time given (--step-time)")
    step = parse_step_time(step_time)
    try:
        first_step_s = step.seconds(next(source))
    except ValueError as error:
        return no_round(reason=f"step {step_time}: {error}; give --step-time SECONDS for a fixed step")
    fits = FEED_ROUND_SAMPLES * max(first_step_s, MIN_INTERVAL_S) <= (1 - FEED_SEARCH_SHARE) * share_s
    run = run_emulated(source, step=step, mel_config=mel_config, config=EmulatedRunConfig(
        batches=8, warmup_batches=1, min_samples=FEED_ROUND_SAMPLES if fits else 0))
    step_s = statistics.median(run.step_s)
    return FeedFigures(pipeline=label, feed=result, step_time=step_time, step_s=step_s,
                       keeps_busy=keeps_busy(result.step_s, result.step_low_s, result.step_high_s, step_s),
                       round=run.figures(), stats=emulated_stats(run), timeline=run.timeline)


def keeps_busy(fed_s: float | None, low_s: float | None, high_s: float | None, step_s: float) -> bool | None:
    """Whether a step of step_s is kept >= 90 % busy, from a feed rate's interval: True at or above its
    upper end, False at or below its lower end (a step seen to fail), None inside it."""
    if fed_s is None:  # no step up to low_s was kept busy
        return False if step_s <= low_s else None
    if step_s >= high_s:
        return True
    return False if low_s is not None and step_s <= low_s else None


def sweep_points(axis: str, settings: DiagnoseSettings) -> tuple[int, ...]:
    """The points of a sweep axis, the current setting included, in increasing order (AUTOTUNE first)."""
    if axis == "workers":
        return tuple(sorted({*settings.sweep_workers, settings.workers}))
    if axis == "batch_size":
        return tuple(sorted({*settings.sweep_batch_sizes, settings.batch_size}))
    raise ValueError(f"axis: expected one of {SWEEP_AXES}, found {axis!r}")


def sweep_stage(stage: Stage, loader, settings: DiagnoseSettings) -> tuple[SweepAxis, ...]:
    """Both SWEEP_AXES, the stage's share split between them by their number of points."""
    weights = {axis: float(len(sweep_points(axis, settings))) for axis in SWEEP_AXES}
    stage.planned(f"tf_native WAV samples/s at {int(weights['workers'])} worker counts, then at "
                   f"{int(weights['batch_size'])} batch sizes, in interleaved rounds after a warm-up round; the "
                   "share split by points")
    found = []
    for axis in SWEEP_AXES:
        share = split_budget(stage.left_s(), weights)[axis]
        weights.pop(axis)
        found.append(_sweep_axis(stage, axis, loader, settings, share))
    stage.status = worst_status(status for _, status in found)
    return tuple(figures for figures, _ in found if figures is not None)


def _sweep_axis(stage: Stage, axis: str, loader, settings: DiagnoseSettings, share_s: float):
    """(SweepAxis or None without a measured round, status): tf_native WAV samples/s at every point of the axis
    in interleaved rounds until every point's ratio to the current one is decided or share_s is spent. On the
    batch-size axis a round reads about as many samples at every point (2 batches at least), so they take as long."""
    points, current = sweep_points(axis, settings), getattr(settings, axis)
    batches = {point: settings.batches if axis == "workers" else max(2, round(settings.batches * current / point))
               for point in points}
    rounds = _dataset_rounds({point: (f"sweep-{axis}-{point}", loader(Pipeline("tf_native", "wav"), **{axis: point}),
                                      batches[point]) for point in points}, warmup=settings.warmup)

    def figures() -> SweepAxis | None:
        if not rounds.orders:
            return None
        values = {point: [m.samples_per_s for m in measured] for point, measured in rounds.values.items()}
        return sweep_figures(axis=axis, current=current, values=values, order=rounds.orders, batches=batches)

    def decided() -> bool:
        return all(point.ratio.decided for point in figures().points if point.ratio is not None)

    outcome = rounds.until_decided(decided, driver=stage.rounds_until_decided, share_s=share_s,
                                   what=f"{axis.replace('_', ' ')}: ")
    return figures(), status_of(outcome)


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
    for point, measured in values.items():
        per_round = tuple(float(v) for v in measured)
        median = float(statistics.median(per_round))
        gain = ratio = None
        if point != current:
            paired = stats.paired_gain(candidate=per_round, reference=values[current], alpha=SWEEP_ALPHA,
                                       min_effect=SWEEP_MIN_GAIN, min_win_share=SWEEP_MIN_WIN_SHARE)
            gain, ratio = paired, estimate(paired.ratios, SWEEP_BOUNDARIES)
        points.append(SweepPoint(point=point, current=point == current, batches=(batches or {}).get(point),
                                 samples_per_s=median, samples_per_s_low=min(per_round),
                                 samples_per_s_high=max(per_round),
                                 samples_per_s_spread=(max(per_round) - min(per_round)) / median,
                                 samples_per_s_rounds=per_round, interval=estimate(per_round), vs_current=gain,
                                 ratio=ratio))
    return SweepAxis(axis=axis, current=current, rounds=len(values[current]), min_gain=SWEEP_MIN_GAIN,
                     min_win_share=SWEEP_MIN_WIN_SHARE, alpha=SWEEP_ALPHA, points=tuple(points),
                     order=tuple(tuple(labels) for labels in order))


def trace_stage(stage: Stage, step, call_s: float, dataset, trace_dir: Path, steps: int) -> str | None:
    """A TensorBoard profiler trace of `steps` steady steps (two untimed steps first) when they fit the share;
    otherwise TOO_SHORT and no trace."""
    from perfsuite._tensorflow import tensorflow

    need_s = (2 + steps) * call_s
    stage.plan = f"a profiler trace of {steps} steady steps after 2 untimed ones, about {need_s:.1f} s"
    if need_s > stage.left_s():
        stage.status = TOO_SHORT
        stage.tell("note", f"skipped: it needs about {need_s:.0f} s, {max(stage.left_s(), 0):.0f} s are left")
        return None
    stage.tell("note", stage.plan)
    profiler, iterator = tensorflow().profiler.experimental, iter(dataset)
    for _ in range(2):
        step(next(iterator)).numpy()
    trace_dir.mkdir(parents=True, exist_ok=True)
    profiler.start(str(trace_dir))
    try:
        for _ in range(steps):
            step(next(iterator)).numpy()
    finally:
        profiler.stop()
    return str(trace_dir)


def gpu_sampled(work: Callable[[], Any]) -> tuple[Any, GpuFigures]:
    """(work(), the GpuFigures of GPU sampling around it; where no GPU can be sampled, they say why)."""
    from perfsuite.errors import GpuUnavailable
    from perfsuite.measure.gpu import GpuSampler
    from perfsuite.measure.utilisation import gpu_stats

    with contextlib.ExitStack() as sampling:
        try:
            sampler = sampling.enter_context(GpuSampler())
        except GpuUnavailable as error:
            sampler, reason = None, error.reason
        result = work()
    if sampler is None:
        return result, GpuFigures(available=False, reason=reason)
    try:
        return result, GpuFigures(available=True, stats=gpu_stats(sampler.timeline), timeline=sampler.timeline)
    except ValueError as error:  # sampled, but no utilisation sample fell in the window
        return result, GpuFigures(available=True, reason=str(error), timeline=sampler.timeline)

