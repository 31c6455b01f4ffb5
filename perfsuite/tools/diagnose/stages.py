"""The stages that are functions of their Stage (the emulated feed, the sweep, the trace); GPU sampling."""

from __future__ import annotations

import contextlib
import functools
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfsuite.measure import emulated  # no TensorFlow
from perfsuite.measure.rounds import InterleavedRounds
from perfsuite.measure.step_model import StepModel
from perfsuite.tools.diagnose.plan import Stage, split_budget, status_of, worst_status
from perfsuite.verdict import diagnosis_figures as fig
from perfsuite.verdict.diagnosis import feed_words

FEED_SEARCH_SHARE = 0.6  # of the feed stage's share: the search; the rest, a round at the step
FEED_ROUND_SAMPLES = 32  # utilisation samples of that round: the cycle detector's minimum
MIN_FEED_S = 0.5  # a feed-rate search needs more than this share


def feed_stage(stage: Stage, label: str, start: Callable[[], Iterator], *, step_time: str | None
               ) -> fig.FeedFigures | None:
    """feed_figures of the batches start() gives in what is left once it started (it may drain buffers
    first); MIN_FEED_S or less left ends the stage TOO_SHORT, saying so."""
    stage.planned(f"1 pipeline(s): a feed-rate search each, then a round at the {step_time} step")
    batches = start()
    share_s = stage.left_s()
    if share_s <= MIN_FEED_S:
        stage.planned(f"{label}: no time left for a feed-rate search once its iterator started (draining its "
                      "buffers, where it does, can take the whole share): "
                      f"{stage.left_s():.1f} s left", fig.TOO_SHORT)
        return None
    figures = feed_figures(batches, label=label, step_time=step_time, share_s=share_s)
    stage.rounds += 1
    stage.tell("round", f"{label}: {feed_words(figures)}")
    stage.status = fig.DECIDED if figures.keeps_busy is not None else fig.UNDECIDED
    return figures


def feed_figures(source: Iterator, *, label: str, step_time: str | None, share_s: float) -> fig.FeedFigures:
    """An endless batch iterator's feed rate (FEED_SEARCH_SHARE of share_s), then a round at step_time (None:
    none) of FEED_ROUND_SAMPLES samples where the rest holds them; a step it cannot give says why."""
    result = emulated.feed_rate(source, config=emulated.FeedRateConfig(budget_s=FEED_SEARCH_SHARE * share_s))
    no_round = functools.partial(fig.FeedFigures, pipeline=label, feed=result, step_time=step_time, step_s=None,
                                 keeps_busy=None, round=None, stats=None, timeline=None)
    if step_time is None:
        return no_round(reason="no step time given (--step-time)")
    step = emulated.parse_step_time(step_time)
    try:
        first_step_s = step.seconds(next(source))
    except ValueError as error:
        return no_round(reason=f"step {step_time}: {error}; give --step-time SECONDS for a fixed step")
    round_s = FEED_ROUND_SAMPLES * max(first_step_s, emulated.MIN_INTERVAL_S)
    fits = round_s <= (1 - FEED_SEARCH_SHARE) * share_s
    run = emulated.run_emulated(source, step=step, config=emulated.EmulatedRunConfig(
        batches=8, warmup_batches=1, min_samples=FEED_ROUND_SAMPLES if fits else 0))
    step_s = statistics.median(run.step_s)
    return fig.FeedFigures(pipeline=label, feed=result, step_time=step_time, step_s=step_s,
                           keeps_busy=keeps_busy(result.step_s, result.step_low_s, result.step_high_s, step_s),
                           round=run.figures(), stats=emulated.emulated_stats(run), timeline=run.timeline)


def keeps_busy(fed_s: float | None, low_s: float | None, high_s: float | None, step_s: float) -> bool | None:
    """Whether a step of step_s is kept >= 90 % busy, from a feed rate's interval: True at or above its
    upper end, False at or below its lower end (a step seen to fail), None inside it."""
    if fed_s is None:  # no step up to low_s was kept busy
        return False if step_s <= low_s else None
    if step_s >= high_s:
        return True
    return False if low_s is not None and step_s <= low_s else None


def sweep_points(axis: str, settings: fig.DiagnoseSettings) -> tuple[int, ...]:
    """The points of a sweep axis, the current setting included, in increasing order (AUTOTUNE first)."""
    if axis == "workers":
        return tuple(sorted({*settings.sweep_workers, settings.workers}))
    if axis == "batch_size":
        return tuple(sorted({*settings.sweep_batch_sizes, settings.batch_size}))
    raise ValueError(f"axis: expected one of {fig.SWEEP_AXES}, found {axis!r}")


def sweep_stage(stage: Stage, loader, settings: fig.DiagnoseSettings) -> tuple[fig.SweepAxis, ...]:
    """Both SWEEP_AXES, the stage's share split between them by their number of points."""
    weights = {axis: float(len(sweep_points(axis, settings))) for axis in fig.SWEEP_AXES}
    stage.planned(f"tf_native WAV samples/s at {int(weights['workers'])} worker counts, then at "
                  f"{int(weights['batch_size'])} batch sizes, in interleaved rounds after a warm-up round; "
                  "the share split by points")
    found = []
    for axis in fig.SWEEP_AXES:
        found.append(_sweep_axis(stage, axis, loader, settings, split_budget(stage.left_s(), weights)[axis]))
        weights.pop(axis)
    stage.status = worst_status(status for _, status in found)
    return tuple(figures for figures, _ in found if figures is not None)


def _sweep_axis(stage: Stage, axis: str, loader, settings: fig.DiagnoseSettings, share_s: float):
    """(SweepAxis or None, status): samples/s at every point of the axis in interleaved rounds of fresh
    iterators, after a warm-up round of a batch a point (start-up, reads) that sizes the next, until every
    ratio to the current point is decided. Batch sizes read about as many samples (2 batches at least)."""
    from perfsuite.measure import timing

    points, current = sweep_points(axis, settings), getattr(settings, axis)
    batches = {point: settings.batches if axis == "workers" else
               max(2, round(settings.batches * current / point)) for point in points}
    datasets = {point: loader(**{axis: point}) for point in points}

    def measure(point):
        return timing.measure_dataset(dataset=datasets[point], name=f"sweep-{axis}-{point}",
                                      warmup_batches=settings.warmup,
                                      measure_batches=1 if rounds.warming_up else batches[point])

    rounds = InterleavedRounds({point: functools.partial(measure, point) for point in points},
                               warmup_rounds=1)

    def figures() -> fig.SweepAxis | None:
        if not rounds.orders:
            return None
        values = {point: [m.samples_per_s for m in measured] for point, measured in rounds.values.items()}
        return sweep_figures(axis=axis, current=current, values=values, order=rounds.orders, batches=batches)

    def decided() -> bool:
        return all(point.ratio.decided for point in figures().points if point.ratio is not None)

    outcome = rounds.until_decided(decided, driver=stage.rounds_until_decided, share_s=share_s,
                                   what=f"{axis.replace('_', ' ')}: ")
    return figures(), status_of(outcome)


def sweep_figures(*, axis: str, current: int, values: dict, order=(), batches: dict | None = None
                  ) -> fig.SweepAxis:
    """One sweep axis from samples/s {point: [per round]}: per point their figures and, but for the current
    point, the same rounds' ratios to it, paired (stats.paired_gain) and against SWEEP_BOUNDARIES."""
    from perfsuite.measure import stats

    if current not in values:
        raise ValueError(f"current: expected one of the measured points {sorted(values)}, found {current!r}")
    points = []
    for point, measured in values.items():
        per_round = tuple(float(v) for v in measured)
        median = float(statistics.median(per_round))
        gain = ratio = None
        if point != current:
            gain = stats.paired_gain(candidate=per_round, reference=values[current], alpha=fig.SWEEP_ALPHA,
                                     min_effect=fig.SWEEP_MIN_GAIN, min_win_share=fig.SWEEP_MIN_WIN_SHARE)
            ratio = fig.estimate(gain.ratios, fig.SWEEP_BOUNDARIES)
        low, high = min(per_round), max(per_round)
        points.append(fig.SweepPoint(point=point, current=point == current, batches=(batches or {}).get(point),
                                     samples_per_s=median, samples_per_s_low=low, samples_per_s_high=high,
                                     samples_per_s_spread=(high - low) / median, samples_per_s_rounds=per_round,
                                     interval=fig.estimate(per_round), vs_current=gain, ratio=ratio))
    return fig.SweepAxis(axis=axis, current=current, rounds=len(values[current]), min_gain=fig.SWEEP_MIN_GAIN,
                         min_win_share=fig.SWEEP_MIN_WIN_SHARE, alpha=fig.SWEEP_ALPHA, points=tuple(points),
                         order=tuple(tuple(labels) for labels in order))


def trace_stage(stage: Stage, step: StepModel, call_s: float, dataset, trace_dir: Path, steps: int) -> str | None:
    """A profiler trace of `steps` steady steps after two untimed where they fit the share, else TOO_SHORT."""
    from perfsuite._tensorflow import tensorflow

    need_s = (2 + steps) * call_s
    stage.plan = f"a profiler trace of {steps} steady steps after 2 untimed ones, about {need_s:.1f} s"
    if need_s > stage.left_s():
        stage.status = fig.TOO_SHORT
        stage.tell("note", f"skipped: it needs about {need_s:.0f} s, {max(stage.left_s(), 0):.0f} s are left")
        return None
    stage.tell("note", stage.plan)
    profiler, iterator = tensorflow().profiler.experimental, iter(dataset)
    step.calls(iterator, warmup=2, count=0)
    trace_dir.mkdir(parents=True, exist_ok=True)
    profiler.start(str(trace_dir))
    try:
        step.calls(iterator, count=steps)
    finally:
        profiler.stop()
    return str(trace_dir)


def gpu_sampled(work: Callable[[], Any]) -> tuple[Any, fig.GpuFigures]:
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
        return result, fig.GpuFigures(available=False, reason=reason)
    timeline = sampler.timeline
    try:
        return result, fig.GpuFigures(available=True, stats=gpu_stats(timeline), timeline=timeline)
    except ValueError as error:  # sampled, but no utilisation sample fell in the window
        return result, fig.GpuFigures(available=True, reason=str(error), timeline=timeline)
